"""Branch rollouts: G continuations restored from one snapshot of a trunk's state, the shared prefix marked in
the turn table (trained and counted once), exact step groups, whole token sequences."""
import pytest

from agentgym.engine.branching import BranchConfig, branch_rollout, step_group_sizes, trained_rows
from agentgym.envs.toy.keydoor import KeyDoorEnv
from agentgym.errors import ConfigError
from agentgym.policies.scripted import RandomPolicy
from agentgym.engine.rollout import RolloutConfig
from agentgym.trajectory import TurnTable

HOUSEHOLD = "agentgym/Household-v0"


@pytest.mark.parametrize("layout", ["trajectory", "step"])
def test_branches_continue_from_the_trunks_state(layout):
    seeds, branch = [3, 5], BranchConfig(turns=(0, 2), G=3)
    config = RolloutConfig(max_turns=8, layout=layout, executor="thread")
    trajs = branch_rollout(HOUSEHOLD, RandomPolicy(seed=1), None, seeds, branch, config)
    trunks, branches = trajs[:2], trajs[2:]
    assert len(branches) == 2 * 2 * 3 and all(t.error is None for t in trajs)
    for i, b in enumerate(branches):
        trunk, k = trunks[i // 6], (0, 2)[(i // 3) % 2]
        assert b.shared_prefix == k and b.seed == trunk.seed and b.group_id == 2 + i // 3
        assert b.turns[:k] == trunk.turns[:k]
        assert b.turns[k].observation == trunk.turns[k].observation
        assert b.turns[k].anchor == trunk.turns[k].anchor
        assert [t.index for t in b.turns] == list(range(len(b.turns)))
        if layout == "trajectory":
            assert b.turns[k].prompt_ids == trunk.turns[k].prompt_ids
    # different continuations: the policy samples independently in each branch
    assert len({tuple(t.action for t in b.turns) for b in branches[:3]}) > 1


def test_turn_table_marks_the_prefix_and_step_groups_are_exact():
    branch = BranchConfig(turns=(2,), G=4)
    trajs = branch_rollout(HOUSEHOLD, RandomPolicy(seed=2), None, [7], branch, RolloutConfig(max_turns=6))
    table = TurnTable.from_trajectories(trajs)
    trunk, branches = trajs[0], trajs[1:]
    assert int(table.shared.sum()) == 2 * 4
    trained = trained_rows(table)
    # every turn trained exactly once: the trunk's all, each branch's from turn 2 on
    assert int(trained.sum()) == len(trunk.turns) + sum(len(b.turns) - 2 for b in branches)
    first = [row for row in range(len(table)) if table.group[row] == 1 and table.turn[row] == 2]
    assert len(first) == 4 and len(set(table.anchor[first].tolist())) == 1
    assert step_group_sizes(table)[(1, int(table.anchor[first[0]]))] >= 4
    assert max(len(t.turns) for t in trajs) == 6  # a branch's copied turns count towards its turn limit


def test_branch_samples_keep_token_in_token_out():
    samples = pytest.importorskip("agentgym.train.samples")
    trajs = branch_rollout(HOUSEHOLD, RandomPolicy(seed=3), None, [1], BranchConfig(turns=(1,), G=2),
                           RolloutConfig(max_turns=5))
    built = samples.build_samples(trajs, "trajectory")   # raises TokenMismatchError on a broken sequence
    assert len(built) == 3


class _NoSnapshots(KeyDoorEnv):
    snapshot_fields = ()


def test_refusals():
    with pytest.raises(ConfigError, match="no snapshot"):
        branch_rollout(lambda: _NoSnapshots(), RandomPolicy(seed=0), None, [0], BranchConfig(turns=(1,)),
                       RolloutConfig(max_turns=4))
    with pytest.raises(ConfigError, match="executor"):
        branch_rollout(HOUSEHOLD, RandomPolicy(seed=0), None, [0], config=RolloutConfig(executor="process"))
    with pytest.raises(ConfigError, match="not fold"):
        branch_rollout(HOUSEHOLD, RandomPolicy(seed=0), None, [0], config=RolloutConfig(layout="fold"))
    with pytest.raises(ConfigError, match="G and branch.points must be"):
        BranchConfig(turns=(1,), G=0)


def _played(n: int, revisits=(), failed: bool = False):
    from agentgym.trajectory import Trajectory, Turn

    turns = tuple(Turn(index=i, observation=f"o{i}", action=f"a{i}", prompt_ids=(), response_ids=(), logprobs=(),
                       reward=0.0, reward_components={"revisit": -0.05} if i in revisits else {}) for i in range(n))
    return Trajectory("e", 0, 0, 0, turns, False, "failed" if failed else "max_turns")


def test_where_to_branch_turns_shares_and_rules():
    import random

    ten = _played(10, revisits=(3, 7))
    assert BranchConfig(turns=(0, 4, 12)).turns_of(ten, random.Random(0)) == [0, 4]   # a turn it never reached: none
    assert BranchConfig(shares=(0.5, 0.99, 0.0)).turns_of(ten, random.Random(0)) == [0, 5, 9]
    assert BranchConfig(shares=(0.5,)).turns_of(_played(3), random.Random(0)) == [1]
    assert BranchConfig(rule="late", points=2).turns_of(ten, random.Random(0)) == [8, 9]
    assert BranchConfig(rule="revisit", points=2).turns_of(ten, random.Random(0)) == [3, 7]
    three = BranchConfig(rule="revisit", points=3).turns_of(ten, random.Random(0))
    assert {3, 7} < set(three) and len(three) == 3
    drawn = BranchConfig(rule="random", points=4).turns_of(ten, random.Random(5))
    assert drawn == sorted(set(drawn)) and len(drawn) == 4
    assert BranchConfig(rule="random", points=4).turns_of(ten, random.Random(5)) == drawn  # the rng decides
    assert BranchConfig(turns=(1,)).turns_of(_played(5, failed=True), random.Random(0)) == []
    for bad in ({}, {"turns": (1,), "rule": "late"}, {"shares": (1.0,)}, {"rule": "loops"}, {"rule": "late", "points": 0}):
        with pytest.raises(ConfigError):
            BranchConfig(**bad)


def test_a_replay_that_reaches_another_state_stops_naming_env_seed_and_turn():
    from dataclasses import replace

    from agentgym.errors import CheckError

    trajs = branch_rollout(HOUSEHOLD, RandomPolicy(seed=4), None, [2], BranchConfig(turns=(2,), G=2),
                           RolloutConfig(max_turns=5))
    trunk = trajs[0]
    moved = replace(trunk, turns=(*trunk.turns[:2], replace(trunk.turns[2], anchor="somewhere else"),
                                  *trunk.turns[3:]))
    from agentgym.engine.branching import grow_branches

    with pytest.raises(CheckError, match=f"env {HOUSEHOLD} seed 2: replaying to turn 2 reached another state"):
        grow_branches(HOUSEHOLD, RandomPolicy(seed=4), None, [(moved, 2)], 2, RolloutConfig(max_turns=5))
