"""Infrastructure failure is not the agent's failure (issue 51): episodes an env crash ended leave their group
before any estimator sees them, are counted per iteration, and past a stated share the run stops with the
first error's text. Played on the tiny model with a real env that raises in step on chosen plays."""
from __future__ import annotations

import dataclasses

from pathlib import Path

import pytest
import test_checkpoint_faults  # tests/train/: its small_disk fixture

from agentgym.errors import ConfigError
from agentgym.train.config import load_config
from agentgym.train.guardrails import GuardrailError
from agentgym.train.metrics import read_metrics
from agentgym.train.trainer import train

pytest.importorskip("transformers")
SMALL = ["rollout.groups=2", "rollout.group_size=4", "eval.every=0", "train.mini_batches=2", "train.micro_batch_size=16",
         "rollout.executor=serial", "train.torch_threads=1"]


def _register_crashing_env(scratch_ids, fail: dict[int, int]) -> str:
    """A one-word key-door whose first `fail[seed]` plays of a seed (in reset order) raise in step, as an env
    server that dies under them would."""
    import agentgym
    from agentgym.envs.toy.oneword import OneWordKeyDoor

    plays: dict[int, int] = {}

    class Crashing(OneWordKeyDoor):
        def reset(self, *, seed=None, options=None):
            plays[seed] = plays.get(seed, 0) + 1
            self.crashes = plays[seed] <= fail.get(seed, 0)
            return super().reset(seed=seed, options=options)

        def step(self, action):
            if self.crashes:
                raise ConnectionError("env server on 127.0.0.1 went away")
            return super().step(action)

    env_id = "test/Crashing" + "".join(f"s{s}x{n}" for s, n in sorted(fail.items())) + "-v0"
    agentgym.register(env_id, entry_point=Crashing, max_turns=8)
    scratch_ids.append(env_id)
    return env_id


def test_failed_plays_leave_their_group_and_are_counted(tmp_path: Path, scratch_ids):
    """Seed 0: 1 of 4 plays crashes (the group trains on 3); seed 1: 3 of 4 crash (one play left: the whole
    group is dropped). Half the batch failed: at the limit, so the run goes on."""
    env_id = _register_crashing_env(scratch_ids, {0: 1, 1: 3})
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *SMALL,
                                             f"rollout.env={env_id}"]))
    [m] = read_metrics(run)
    assert m["infra/failed_episodes"] == 4.0 and m["infra/failed_share"] == 0.5
    assert m["infra/dropped_groups"] == 1.0 and m["episodes_trained"] == 3.0
    assert "guard/infra_failures" not in m and "grad_norm" in m


def test_past_the_share_the_run_stops_with_the_first_error(tmp_path: Path, scratch_ids):
    env_id = _register_crashing_env(scratch_ids, {0: 4, 1: 1})  # 5 of 8 crash
    with pytest.raises(GuardrailError) as stopped:
        train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=2", *SMALL,
                                           f"rollout.env={env_id}"]))
    message = str(stopped.value)
    print(message)
    assert message.startswith("iteration 0: 62% of the iteration's episodes (5) failed") and "\n" not in message
    assert "env server on 127.0.0.1 went away" in message and "infra_failures=warn" in message
    [m] = read_metrics(tmp_path)
    assert m["guard/infra_failures"] == 1.0 and "grad_norm" not in m  # stopped before the update


def test_warn_goes_on_and_a_bad_share_is_refused(tmp_path: Path, scratch_ids, capsys):
    env_id = _register_crashing_env(scratch_ids, {0: 4, 1: 1})
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *SMALL,
                                             f"rollout.env={env_id}", "train.guardrails.infra_failures=warn"]))
    [m] = read_metrics(run)
    assert m["episodes_trained"] == 3.0 and m["infra/dropped_groups"] == 1.0
    assert "failed for infrastructure reasons" in capsys.readouterr().err
    for bad in ("1.5", "-0.1", "1"):
        with pytest.raises(ConfigError, match="max_infra_failure_share must be in"):
            load_config("toy_learning", [f"train.guardrails.max_infra_failure_share={bad}"])


def test_group_rewards_are_scored_among_the_plays_that_did_not_fail():
    """A group reward compares a group's plays; a failed play must not take part (before: it was scored with
    its group, then dropped)."""
    from types import SimpleNamespace

    from agentgym.train.collectors.base import scored_usable
    from agentgym.trajectory import Trajectory

    played = [Trajectory("e", 0, 0, k, (), success=False, end_reason="failed" if k == 1 else "max_turns")
              for k in range(3)]
    seen: list[list[int]] = []

    def with_group_rewards(trajectories):
        seen.append([t.sample_index for t in trajectories])
        return [dataclasses.replace(t, task="scored") for t in trajectories]

    kept, logged, failed, mixed = scored_usable(SimpleNamespace(with_group_rewards=with_group_rewards), played, 3)
    assert seen == [[0, 2]] and [t.sample_index for t in kept] == [0, 2] and all(t.task == "scored" for t in kept)
    assert [(t.sample_index, t.task) for t in logged] == [(0, "scored"), (1, ""), (2, "scored")]  # all logged
    assert failed == {"failed_dropped": 1.0, "groups_dropped_after_failures": 0.0} and mixed == 0

# ------------------------------------------------------------------ a full disk under the run's logs

small_disk = test_checkpoint_faults.small_disk  # the tmpfs fixture


def _fill(disk: Path) -> None:
    """Take every byte of `disk` left."""
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_full_disk_under_a_log_write_stops_in_one_line_and_leaves_no_torn_line(small_disk):
    from agentgym.train.metrics import LogWriteError, MetricsWriter, write_rollouts
    from agentgym.trajectory import Trajectory

    run_dir = small_disk(64)
    (run_dir / "ckpt-1").mkdir()
    (run_dir / "ckpt-1" / "trainer.pt").write_bytes(b"state")  # a whole checkpoint (written before manifests)
    writer = MetricsWriter(run_dir, total=3, progress=False)
    writer.write(0, {"success": 0.5})
    before = (run_dir / "metrics.jsonl").read_text()
    _fill(run_dir)
    with pytest.raises(LogWriteError) as full:
        writer.write(1, {"success": 0.5, "note": "x" * 20_000})
    message = str(full.value)
    print(message)
    assert message.startswith(f"metrics.jsonl ({run_dir / 'metrics.jsonl'}) could not be written: the disk is full")
    assert "\n" not in message and "the last good checkpoint, ckpt-1, is intact" in message
    assert "checkpoint.resume=auto" in message
    assert (run_dir / "metrics.jsonl").read_text() == before  # the cut line was taken back
    episode = Trajectory(env_id="e", seed=0, group_id=0, sample_index=0, turns=(), success=False,
                         end_reason="failed", first_observation="y" * 1999)
    with pytest.raises(LogWriteError, match=r"^rollouts.jsonl .* could not be written: the disk is full"):
        write_rollouts(run_dir, 1, [episode] * 4)
    assert not (run_dir / "rollouts.jsonl").read_text()
