"""The household env under the rollout engine with the scripted policies (oracle, random)."""
from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("agentgym.engine.rollout") is None or importlib.util.find_spec("agentgym.policies.scripted") is None,
    reason="the rollout engine or the scripted policies are not built yet")


def test_oracle_policy_solves_every_episode_and_groups_share_anchors():
    from agentgym.policies.scripted import OraclePolicy
    from agentgym.engine.rollout import RolloutConfig, rollout

    config = RolloutConfig(executor="serial")
    trajs = rollout("agentgym/Household-v0", OraclePolicy(), None, seeds=list(range(12)), group_size=2,
                    config=config, env_kwargs={"split": "test_unseen"})
    assert len(trajs) == 24 and all(t.success for t in trajs)
    assert all(t.total_reward == 1.0 for t in trajs)
    for a, b in zip(trajs[::2], trajs[1::2]):  # the two samples of one task act identically
        assert a.task_id == b.task_id and [t.anchor for t in a.turns] == [t.anchor for t in b.turns]


def test_random_policy_solves_few():
    from agentgym.policies.scripted import RandomPolicy
    from agentgym.engine.rollout import RolloutConfig, rollout

    trajs = rollout("agentgym/Household-v0", RandomPolicy(seed=0), None, seeds=list(range(30)),
                    config=RolloutConfig(executor="serial", max_turns=30))
    assert sum(t.success for t in trajs) <= 4
    assert all(t.invalid_actions == 0 for t in trajs)  # it only picks admissible commands
