"""HGPO: worked examples (numbers by hand in the comments), the reduction to GiGPO, and the rollout's
per-turn history keys."""
from __future__ import annotations

import numpy as np
import pytest

from agentgym.chat import ChatFormat
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.train.estimators import advantages as adv
from agentgym.trajectory import Trajectory, Turn, TurnTable, history_keys


def one_step_table(rewards, anchor="s"):
    n = len(rewards)
    return TurnTable.from_columns([0] * n, list(range(n)), [0] * n, [anchor] * n, rewards)


def test_hgpo_step_worked_example():
    # 4 turns from anchor s, returns (1, 0, 1, 1); turns 0,1 came through history a, turns 2,3 through b.
    # level 0 (w=1): mean .75, unbiased std .5 -> (.5, -1.5, .5, .5)
    # level 1 (w=2): {0,1}: (1, 0) -> ±.70711; {2,3}: (1, 1) constant -> 0
    # A_step = (1·A0 + 2·A1) / 3 -> (.63807, -.97140, .16667, .16667)
    t = one_step_table([1.0, 0.0, 1.0, 1.0])
    codes = np.array([[0], [0], [1], [1]])
    np.testing.assert_allclose(adv.hgpo_step(t, codes, eps=0.0), [0.63807, -0.97140, 0.16667, 0.16667], atol=1e-5)
    # alpha = 0: equal weights -> (A0 + A1) / 2
    np.testing.assert_allclose(adv.hgpo_step(t, codes, eps=0.0, alpha=0.0),
                               [(0.5 + 0.70711) / 2, (-1.5 - 0.70711) / 2, 0.25, 0.25], atol=1e-5)


def test_hgpo_singleton_level_gives_its_weight_to_the_others():
    # histories (a, a, b, c): turns 2 and 3 have no level-1 partner, so level 0 alone decides for them
    t = one_step_table([1.0, 0.0, 1.0, 1.0])
    got = adv.hgpo_step(t, np.array([[0], [0], [1], [2]]), eps=0.0)
    np.testing.assert_allclose(got, [0.63807, -0.97140, 0.5, 0.5], atol=1e-5)
    # a turn alone at every level gets exactly 0
    assert adv.hgpo_step(one_step_table([3.0]), np.array([[0]]))[0] == 0.0


def test_hgpo_mean_mode_and_episode_part():
    # mode "mean", K=1, histories (a, a, b, b): level 0 centred (.25, -.75, .25, .25); level 1 (.5, -.5, 0, 0)
    t = one_step_table([1.0, 0.0, 1.0, 1.0])
    codes = np.array([[0], [0], [1], [1]])
    step = adv.hgpo_step(t, codes, mode="mean")
    np.testing.assert_allclose(step, [(0.25 + 1.0) / 3, (-0.75 - 1.0) / 3, 0.25 / 3, 0.25 / 3])
    full = adv.hgpo(t, codes, w=0.5, mode="mean")
    np.testing.assert_allclose(full, adv.grpo(t, mode="mean") + 0.5 * step)


def random_table(rng, n_traj=12, groups=3):
    rows = []
    for traj in range(n_traj):
        for turn in range(rng.integers(1, 5)):
            rows.append((traj % groups, traj, turn, f"s{rng.integers(0, 3)}", float(rng.integers(0, 2))))
    return TurnTable.from_columns(*zip(*rows))


@pytest.mark.parametrize("seed", range(5))
def test_hgpo_reduces_to_gigpo(seed):
    t = random_table(np.random.default_rng(seed))
    gigpo = adv.gigpo(t, gamma=0.9, w=0.7)
    # K = 0: only the step group
    np.testing.assert_allclose(adv.hgpo(t, np.zeros((len(t), 0)), gamma=0.9, w=0.7), gigpo, atol=1e-12)
    # K = 3 with every history agreeing: every level is the step group again
    np.testing.assert_allclose(adv.hgpo(t, np.zeros((len(t), 3)), gamma=0.9, w=0.7), gigpo, atol=1e-12)


def test_history_level_codes_use_the_whole_history_when_shorter():
    codes = adv.history_level_codes([(), ("x",), ("x", "y"), ("x",)], depth=2)
    assert codes[0, 0] == codes[0, 1]                    # turn 0: empty history at every level
    assert codes[1, 0] == codes[2, 0] == codes[3, 0]     # last turn agrees
    assert codes[1, 1] != codes[2, 1] and codes[1, 1] == codes[3, 1]


def turn(i, obs, action):
    return Turn(i, obs, action, (), (), (), 0.0, anchor=obs)


def test_history_keys_chain_and_depth():
    a = [turn(0, "o0", "left"), turn(1, "o1", "up")]
    b = [turn(0, "o0", "right"), turn(1, "o1", "up")]
    ka, kb = history_keys(a, 4), history_keys(b, 4)
    assert len(ka) == 2 and ka[0] == kb[0] and ka[1] != kb[1]   # same last turn, different turn before
    assert history_keys(a, 1) == ka[:1] and history_keys([], 4) == ()


def test_rollout_records_history_keys_and_they_round_trip():
    script = iter(["left", "right", "left"] * 10)
    [traj] = rollout("agentgym/Toy-KeyDoor-v0", ScriptedPolicy(lambda ctx: next(script)), ChatFormat.simple(), [0],
                     config=RolloutConfig(max_turns=3, history_key_depth=2))
    assert [len(k.history) for k in traj.turns] == [0, 1, 2]
    assert traj.turns[2].history == history_keys(traj.turns[:2], 2)
    assert Trajectory.from_dict(traj.to_dict()).turns == traj.turns


def test_hgpo_is_selectable_in_a_config_and_builds_targets():
    from agentgym.errors import ConfigError
    from agentgym.train.config import config_from_dict
    from agentgym.train.estimators.targets import turn_advantages

    cfg = config_from_dict({}, ["algorithm.estimator=hgpo", "algorithm.hgpo.levels=1", "algorithm.gamma=1.0"])
    a, b = ([turn(0, "o0", "left"), turn(1, "s", "up")], [turn(0, "o0", "right"), turn(1, "s", "up")])
    trajs = []
    for i, (turns, reward) in enumerate([(a, 1.0), (a, 0.0), (b, 1.0), (b, 1.0)]):
        turns = [turns[0], Turn(1, "s", "up", (), (), (), reward, anchor="s", history=history_keys(turns[:1], 4))]
        trajs.append(Trajectory("e", 0, 0, i, tuple(turns), reward > 0, "terminated"))
    table = TurnTable.from_trajectories(trajs)
    got = turn_advantages(cfg.algorithm, table, trajs)
    expected = adv.grpo(table) + adv.hgpo_step(table, adv.history_level_codes(
        [k.history for t in trajs for k in t.turns], 1), gamma=1.0)
    np.testing.assert_allclose(got, expected)
    # the turn-1 rows carry the worked example's step advantages (eps 1e-6 aside)
    np.testing.assert_allclose(got[1::2] - adv.grpo(table)[1::2], [0.63807, -0.97140, 0.16667, 0.16667], atol=1e-4)
    with pytest.raises(ConfigError, match="hgpo.levels"):
        config_from_dict({}, ["algorithm.hgpo.levels=-1"])
