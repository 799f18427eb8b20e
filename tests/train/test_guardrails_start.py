"""The stale_weights guard's distance from the START (issue 51): a rollout side that never receives the trained
weights still samples the starting policy, whatever its precision noise; the guard names that cause within
one iteration of the learner moving, and a healthy run's sampler moves with the learner."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_guardrails import _rollouts_never_get_weights  # tests/train/: a rollout policy whose every push is lost

from agentgym.train.batch import Sample
from agentgym.train.config import load_config
from agentgym.train.guardrails import GuardrailError, GuardrailsSection, check, start_distances, stuck_at_start
from agentgym.train.metrics import read_metrics
from agentgym.train.trainer import train

pytest.importorskip("transformers")
# KL on: the reference model is the starting policy, so its log-probs are the start. max_logprob_gap=10, as a
# user with a noisy (bf16) engine might set it: the plain gap rule cannot fire, only the distance from the start.
KL_RUN = ["rollout.groups=2", "rollout.group_size=4", "eval.every=0", "train.mini_batches=2",
          "train.micro_batch_size=16", "algorithm.regularisers.kl_coef=0.01", "train.guardrails.max_logprob_gap=10"]


def test_a_rollout_side_that_never_gets_weights_is_caught_at_the_first_iteration_after_an_update(tmp_path: Path,
                                                                                                  monkeypatch):
    """Stated bound: the guard fires at iteration 1, the first whose learner has moved (the toy's one update
    moves it by > min_policy_drift); the plain gap limit (10 nats) never would."""
    _rollouts_never_get_weights(monkeypatch)
    with pytest.raises(GuardrailError) as stopped:
        train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=6", *KL_RUN]))
    message = str(stopped.value)
    print(message)
    assert message.startswith("iteration 1: the rollout engine still samples from the STARTING weights")
    assert "train.guardrails.stale_weights=warn" in message and "\n" not in message
    first, second = read_metrics(tmp_path)
    assert first["policy_drift"] < 1e-4 and first["logprob_diff_start"] < 1e-4  # nothing trained yet
    assert second["logprob_diff_start"] < 1e-4 and second["policy_drift"] >= 0.01
    assert second["logprob_diff"] < 10 and second["guard/stale_weights"] == 1.0


def test_a_healthy_run_moves_its_sampler_with_the_learner(tmp_path: Path, capsys):
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=3", *KL_RUN,
                                             "train.guardrails.max_logprob_gap=0.05"]))
    metrics = read_metrics(run)
    assert not any(k.startswith("guard/") for m in metrics for k in m), capsys.readouterr().err
    for m in metrics[1:]:  # the sampler holds the trainer's weights: both are the same distance from the start
        assert m["policy_drift"] > 0.01 and m["logprob_diff_start"] == pytest.approx(m["policy_drift"], abs=1e-4)


def test_no_start_figures_without_the_starting_policy(tmp_path: Path):
    """KL off: the trainer keeps no starting policy, so no distance is logged and the rule stays silent."""
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *KL_RUN[:5]]))
    [m] = read_metrics(run)
    assert "logprob_diff_start" not in m and "policy_drift" not in m


def test_start_distances_and_the_rule_by_hand():
    row = np.array([-1, 0, 0, -1, 1])  # action tokens at 1, 2 and 4; the arrays are shifted by one
    sample = Sample(np.zeros(5, dtype=np.int64), row, np.array([0.0, -1.0, -2.0, 0.0, np.nan]))
    start = [np.array([-1.0, -2.0, 0.0, -9.0])]        # the sampler equals the start where it reported
    trainer = [np.array([-1.5, -2.5, 0.0, -9.0])]
    figures = start_distances([sample], trainer, start)
    assert figures == {"logprob_diff_start": 0.0, "policy_drift": 0.5}  # the NaN position is left out
    assert start_distances([sample], trainer, None) == {}
    moved = [np.array([False, True, False, False])]
    assert start_distances([sample], trainer, start, moved) == {"logprob_diff_start": 0.0, "policy_drift": 0.5}
    nothing = [np.zeros(4, dtype=bool)]
    assert start_distances([sample], trainer, start, nothing) == {}

    section = GuardrailsSection()
    assert stuck_at_start({"logprob_diff_start": 0.0, "policy_drift": 0.5}, section).guard == "stale_weights"
    assert stuck_at_start({"logprob_diff_start": 0.0, "policy_drift": 0.005}, section) is None  # not moved yet
    assert stuck_at_start({"logprob_diff_start": 0.45, "policy_drift": 0.5}, section) is None   # moved with it
    assert stuck_at_start({"logprob_diff": 0.5}, section) is None                               # no start figures
    fired = check({"logprob_diff_start": 0.0, "policy_drift": 0.5, "logprob_diff": 0.5}, section)
    assert [(a.guard, a.message.split(":")[0]) for a, _ in fired][0] == (
        "stale_weights", "the rollout engine still samples from the STARTING weights")
    for bad in ({"min_policy_drift": 0.0}, {"max_start_share": 1.0}):
        with pytest.raises(Exception, match="train.guardrails"):
            GuardrailsSection(**bad)


def test_an_async_run_whose_weights_arrive_raises_nothing(tmp_path: Path, capsys):
    """Async (η = 1): only turns of weights published after an update count, so the first batches, sampled by
    the starting weights by design, read nothing, and later ones track the learner."""
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=4", *KL_RUN,
                                             "train.guardrails.max_logprob_gap=0.05", "train.mode=async",
                                             "algorithm.loss.tis_cap=2"]))
    metrics = read_metrics(run)
    assert not any("guard/stale_weights" in m for m in metrics), capsys.readouterr().err
    measured = [m for m in metrics if "policy_drift" in m]
    assert measured and all(m["logprob_diff_start"] > 0.1 * m["policy_drift"] for m in measured), measured
