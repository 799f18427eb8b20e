"""`rollout.group_rewards` in a training config: the trainer sends each task's G rollouts to a group judge
(a scripted OpenAI-compatible server on loopback) in one call and trains on the judged rewards."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.tools.judges import JudgeClient

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow
from scripted_judge_server import ScriptedJudgeServer  # noqa: E402  (tests/tools is on sys.path under pytest)

from agentgym.train.config import load_config  # noqa: E402
from agentgym.train.trainer import Trainer, train  # noqa: E402


def config(run_dir: Path, *extra: str):
    return load_config("toy_learning", [f"train.run_dir={run_dir}", "rollout.groups=2", "rollout.group_size=4",
                                        "eval.every=0", "train.mini_batches=2", "train.micro_batch_size=16",
                                        "train.iterations=1", *extra])


def test_training_applies_the_group_judge_per_task(tmp_path):
    JudgeClient._shared.clear()
    server = ScriptedJudgeServer(lambda body: (200, json.dumps({"scores": [10, 0, 0, 0]})))
    try:
        judge = f"[{{name: ruler, fn: group_judge, weight: 100.0, kwargs: {{model: 'openai:{server.url}'}}}}]"
        run = train(config(tmp_path / "run", f"rollout.group_rewards={judge}"))
    finally:
        server.close()
        JudgeClient._shared.clear()
    assert len(server.requests) == 2  # one call per task group, all G trajectories in it
    prompt = server.requests[0]["messages"][-1]["content"]
    assert "### Trajectory 4" in prompt and "### Trajectory 5" not in prompt
    rows = [json.loads(line) for line in (Path(run) / "rollouts.jsonl").read_text().splitlines()]
    returns = [r["return"] for r in rows if r["group"] == rows[0]["group"]]
    assert len(returns) == 4 and returns[0] >= 100.0 and all(r < 2.0 for r in returns[1:])


def test_a_bad_group_reward_fails_before_the_model_loads(tmp_path):
    with pytest.raises(ConfigError, match="unknown reward function|cannot import"):
        Trainer(config(tmp_path / "bad", "rollout.group_rewards=[{name: x, fn: nowhere}]"))


def test_a_rubric_env_from_a_training_config(tmp_path):
    rubric_env = ("{env: agentgym/Toy-KeyDoor-OneWord-v0, env_max_turns: 8, keep_env_reward: false, "
                  "env_kwargs: {length: 2, key_bonus: 0.5, key_at_start: true}, "
                  "rubric: [{name: solved, fn: success, weight: 3.0}]}")
    run = train(config(tmp_path / "rubric", "rollout.env=agentgym/Rubric-v0", f"rollout.env_kwargs={rubric_env}"))
    rows = [json.loads(line) for line in (Path(run) / "rollouts.jsonl").read_text().splitlines()]
    assert rows and {r["return"] for r in rows} <= {0.0, 3.0}  # the rubric alone is the reward
    assert all(r["return"] == (3.0 if r["success"] else 0.0) for r in rows)
