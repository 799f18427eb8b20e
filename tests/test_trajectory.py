"""The one serialiser (`to_dict`) and the one outcome (success / failure / error) of trajectories."""
import json

import pytest

from agentgym.eval.metrics import compute_metrics
from agentgym.trajectory import OUTCOMES, Trajectory, Turn, TurnTable
from agentgym.train.metrics import rollout_metrics


def _traj(seed=0, success=False, end_reason="terminated", error=None, anchor=("room", 1)):
    turn = Turn(index=0, observation="o", action="a", prompt_ids=(1, 2), response_ids=(3,), logprobs=(-0.5,),
                reward=1.0 if success else 0.0, reward_components={"goal": 1.0}, anchor=anchor,
                info={"success": success})
    return Trajectory("env", seed, 0, 0, (turn,), success, end_reason, error=error)


def test_outcome_is_error_first_then_success_or_failure():
    assert _traj(success=True).outcome == "success"
    assert _traj(end_reason="max_turns").outcome == "failure"
    assert _traj(end_reason="failed", error="policy raised").outcome == "error"
    # solved, then the policy server died: an error (eval re-runs it), not a success
    assert _traj(success=True, end_reason="failed", error="server down").outcome == "error"
    assert _traj(error="env crashed", end_reason="terminated").outcome in OUTCOMES == ("success", "failure", "error")


def test_training_and_eval_metrics_count_the_same_outcomes():
    batch = [_traj(0, success=True), _traj(1), _traj(2, success=True, end_reason="failed", error="x"),
             _traj(3, end_reason="failed", error="y")]
    train, evaluation = rollout_metrics(batch), compute_metrics(batch)
    assert train["success"] == evaluation.success_rate == 0.25
    assert train["failed_episodes"] == evaluation.errors == 2
    assert evaluation.pass_at_k == {"1": 0.25}
    assert train["reward/goal"] == 1.0  # one turn with {"goal": 1.0} in each of the 4 episodes


def test_reward_components_are_summed_per_episode_and_averaged():
    looped = Trajectory("env", 0, 0, 0, tuple(
        Turn(index=i, observation="o", action="a", prompt_ids=(1,), response_ids=(2,), logprobs=(-0.1,),
             reward=-0.05, reward_components={"revisit": -0.05}) for i in range(3)), False, "max_turns")
    batch = [looped, _traj(1, success=True)]
    metrics = rollout_metrics(batch, prefix="train/")
    assert metrics["train/reward/revisit"] == pytest.approx(-0.15 / 2) and metrics["train/reward/goal"] == 1.0 / 2


def test_to_dict_is_json_ready_and_reads_back():
    traj = _traj(success=True)
    d = traj.to_dict()
    assert d["turns"][0]["anchor"] == "('room', 1)" and d["success"] is True and "outcome" not in d
    back = Trajectory.from_dict(json.loads(json.dumps(d)))
    assert back.turns[0].prompt_ids == (1, 2) and back.turns[0].reward_components == {"goal": 1.0}
    assert back.outcome == "success" and back.turns[0].anchor == "('room', 1)"
    TurnTable.from_trajectories([back, back])  # the read-back anchor is hashable: GiGPO can group on it
    assert _traj(anchor=7).to_dict()["turns"][0]["anchor"] == 7
