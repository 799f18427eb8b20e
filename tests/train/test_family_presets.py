"""Each family's CPU preset runs its whole recipe (fair-expert warm start, then one RL iteration) on the tiny
word-level model: the preset's env, action mode, layout and SFT objective as written, only sizes shrunk."""
from __future__ import annotations

import json

import pytest

from agentgym.train.config import load_config
from agentgym.train.metrics import read_metrics

pytest.importorskip("transformers")

TINY = ["model.policy=tiny:keydoor", "model.train_layers=0", "sft.train_layers=0", "train.iterations=1",
        "rollout.groups=1", "rollout.group_size=2", "sft.episodes=2", "sft.epochs=1", "sft.batch_size=2",
        "sft.evaluate=false", "eval.every=0", "train.torch_threads=1", "logging.progress=false",
        "rollout.env_workers=1"]
PRESETS = {
    "search_cpu": [],
    "web_shop_cpu": ["rollout.env_kwargs.num_products=200", "rollout.max_turns=3", "sft.max_turns=12"],
    "web_shop_text_cpu": ["rollout.env_kwargs.num_products=200", "rollout.max_turns=3", "sft.max_turns=12"],
    "textworld_cpu": ["rollout.max_turns=3", "sft.max_turns=12"],
    "scienceworld_cpu": ["rollout.max_turns=3", "sft.max_turns=25"],
}
NEEDS = {"textworld_cpu": "textworld", "scienceworld_cpu": "scienceworld"}


def run_preset(name: str, tmp_path):
    from agentgym.train.sft.run import with_sft_start
    from agentgym.train.trainer import train

    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    cfg = load_config(name, [f"train.run_dir={tmp_path}", *TINY, *PRESETS[name]])
    assert cfg.sft.enabled and cfg.sft.expert == "fair"  # the preset warm-starts from its fair expert
    run = train(with_sft_start(cfg))  # what `agentgym train PRESET` does
    rows = read_metrics(run)
    assert len(rows) == 1  # one RL iteration, from the warm start's checkpoint
    sft_rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    return rows, next(r for r in sft_rows if r.get("phase") == "data")


@pytest.mark.parametrize("name", [pytest.param("search_cpu", marks=pytest.mark.slow), "web_shop_text_cpu"])
def test_free_text_presets_run_an_iteration_on_the_tiny_model(name, tmp_path):
    rows, sft = run_preset(name, tmp_path)
    assert sft["demo_success"] == 1.0  # both demonstrations succeeded and were trained on
    assert load_config(name).rollout.action_mode == "generate"  # queries are free text


@pytest.mark.parametrize("name", [pytest.param("textworld_cpu", marks=pytest.mark.slow),
                                  pytest.param("scienceworld_cpu", marks=pytest.mark.slow), "web_shop_cpu"])
def test_admissible_presets_run_an_iteration_on_the_tiny_model(name, tmp_path):
    rows, sft = run_preset(name, tmp_path)
    assert sft["demo_success"] == 1.0
    assert load_config(name).rollout.action_mode == "admissible" and load_config(name).sft.objective == "choice"


def test_failed_demonstrations_are_skipped_with_a_count(tmp_path):
    """The shopper cannot finish in 3 turns: every demonstration fails, none is cloned, and the stage says so
    with the count (sft.objective=tokens keeps only solved episodes: train/sft/data.py `successful`)."""
    from agentgym.errors import ConfigError
    from agentgym.train.sft.run import with_sft_start

    cfg = load_config("web_shop_text_cpu", [f"train.run_dir={tmp_path}", *TINY, "rollout.env_kwargs.num_products=200",
                                       "rollout.max_turns=3"])
    with pytest.raises(ConfigError, match=r"no successful episode to clone .*'demo_episodes': 2.0, 'demo_success': 0.0"):
        with_sft_start(cfg)
