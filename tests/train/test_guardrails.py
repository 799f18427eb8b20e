"""Run-health guardrails on real toy runs: the fault is built, the guard fires with the cause and the fix;
a healthy run raises none."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from agentgym.train.config import load_config
from agentgym.train.guardrails import GuardrailError, check, drop_mixed_groups, no_signal, stale_weights
from agentgym.train.metrics import read_metrics
from agentgym.train.trainer import train

pytest.importorskip("transformers")
SMALL = ["rollout.groups=2", "rollout.group_size=4", "eval.every=0", "train.mini_batches=2", "train.micro_batch_size=16"]


def _rollouts_never_get_weights(monkeypatch):
    """A rollout policy with its own copy of the weights (as a vLLM engine) whose push is switched off."""
    from agentgym.policies.hf import HFPolicy
    from agentgym.train import setup

    class NoPush(HFPolicy):
        def update_weights(self, state_dict):
            pass

    monkeypatch.setattr(setup, "make_policy", lambda cfg, model, tok: NoPush(copy.deepcopy(model), tok))


def test_stale_weights_stop_the_run_when_the_push_is_off(tmp_path: Path, monkeypatch):
    _rollouts_never_get_weights(monkeypatch)
    with pytest.raises(GuardrailError) as stopped:
        train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=4", *SMALL]))
    message = str(stopped.value)
    print(message)
    assert message.startswith("iteration 1: the rollout engine's log-probs differ") and "\n" not in message
    assert "not generating with the trained weights" in message and "train.guardrails.stale_weights=warn" in message
    metrics = read_metrics(tmp_path)
    assert metrics[0]["logprob_diff"] < 1e-4 and metrics[-1]["guard/stale_weights"] == 1.0


def test_a_healthy_run_raises_no_guard(tmp_path: Path, capsys):
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=3", *SMALL]))
    metrics = read_metrics(run)
    assert len(metrics) == 3 and not any(k.startswith("guard/") for m in metrics for k in m)
    assert max(m["logprob_diff"] for m in metrics) < 1e-4 and "warning" not in capsys.readouterr().err


def test_guards_by_hand():
    class Section:
        stale_weights, no_signal = "stop", "warn"
        max_logprob_gap, max_zero_advantage_share = 0.05, 1.0

    assert stale_weights({"logprob_diff": 0.01}, Section) is None
    assert stale_weights({"logprob_diff": 0.2}, Section).value == 0.2
    assert no_signal({"zero_advantage_share": 0.5}, Section) is None
    assert "every group's rewards were equal" in no_signal({"zero_advantage_share": 1.0}, Section).message
    Section.not_one_task = "warn"
    fired = check({"logprob_diff": 0.3, "zero_advantage_share": 1.0}, Section)
    assert [(a.guard, action) for a, action in fired] == [("stale_weights", "stop"), ("no_signal", "warn")]
    Section.stale_weights = "off"
    assert [a.guard for a, _ in check({"logprob_diff": 0.3}, Section)] == []


def test_a_group_that_is_not_one_task_is_dropped(tmp_path: Path, scratch_ids, capsys):
    """An env whose reset ignores the seed: each group's members start differently, so every group is
    dropped before training and the guard says why."""
    import agentgym
    from agentgym.envs.toy.oneword import OneWordKeyDoor

    class Unseeded(OneWordKeyDoor):
        calls = 0

        def reset(self, *, seed=None, options=None):
            Unseeded.calls += 1
            obs, info = super().reset(seed=Unseeded.calls, options=options)  # the seed is ignored
            return obs + " left" * (Unseeded.calls % 3 + 1), info  # words the tiny tokenizer knows

    agentgym.register("test/Unseeded-v0", entry_point=Unseeded, max_turns=8)
    scratch_ids.append("test/Unseeded-v0")
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *SMALL,
                                             "rollout.env=test/Unseeded-v0", "rollout.executor=serial"]))
    metrics = read_metrics(run)
    assert metrics[0]["groups_not_one_task"] == 2.0 and metrics[0]["guard/not_one_task"] == 1.0
    assert "did not start from the same first prompt" in capsys.readouterr().err


def test_drop_mixed_groups_by_hand():
    from types import SimpleNamespace as NS

    def traj(group, first):
        return NS(group_id=group, turns=[NS(prompt_ids=first)])

    trajs = [traj(0, (1, 2)), traj(0, (1, 2)), traj(1, (1, 2)), traj(1, (1, 3)), traj(2, (9,))]
    kept, dropped = drop_mixed_groups(trajs)
    assert dropped == 1 and [t.group_id for t in kept] == [0, 0, 2]
