"""Trajectories -> training samples (layouts, masks, the token-prefix check) -> per-token targets."""
from __future__ import annotations

import numpy as np
import pytest

from agentgym.errors import ConfigError, TokenMismatchError
from agentgym.train.algorithm import AlgorithmSection, GaeSection
from agentgym.train.samples import build_samples, collate, micro_batches
from agentgym.train.estimators.targets import anchor_texts, build_targets, turn_advantages
from agentgym.train.trainer import keep_varied_groups, turn_cap
from agentgym.train.config import config_from_dict
from agentgym.train.batch import Scored
from agentgym.trajectory import Trajectory, Turn, TurnTable


def traj(group, rewards, anchors, seed=0, broken=False):
    """A trajectory-layout episode: prompt of turn k = prompt_{k-1} + response_{k-1} + [90 + k]."""
    turns, prompt = [], (1, 2)
    for k, (r, a) in enumerate(zip(rewards, anchors)):
        response = (10 + k, 11 + k)
        turns.append(Turn(index=k, observation=a, action="x", prompt_ids=prompt, response_ids=response,
                          logprobs=(-0.5, -0.25), reward=r, anchor=a))
        prompt = prompt + response + (90 + k,)
        if broken and k == 0:
            prompt = (1, 3) + prompt[2:]
    return Trajectory("toy", seed, group, 0, tuple(turns), success=sum(rewards) > 0, end_reason="terminated")


def test_trajectory_layout_masks_only_responses():
    t = traj(0, [0.0, 1.0], ["a", "b"])
    [s] = build_samples([t], "trajectory")
    # ids: 1 2 | 10 11 | 90 | 11 12  -> rows: -1 -1 0 0 -1 1 1
    assert s.ids.tolist() == [1, 2, 10, 11, 90, 11, 12]
    assert s.row.tolist() == [-1, -1, 0, 0, -1, 1, 1]
    assert s.rollout_logprobs.tolist() == [0, 0, -0.5, -0.25, 0, -0.5, -0.25]


def test_step_layout_one_sample_per_turn_and_row_offsets():
    ts = [traj(0, [0.0, 1.0], ["a", "b"]), traj(0, [0.0], ["a"])]
    samples = build_samples(ts, "step")
    assert len(samples) == 3
    assert [s.row[s.mask].tolist() for s in samples] == [[0, 0], [1, 1], [2, 2]]


def test_retokenized_prompt_is_rejected_loudly():
    with pytest.raises(TokenMismatchError, match="prefix"):
        build_samples([traj(0, [0.0, 1.0], ["a", "b"], broken=True)], "trajectory")


def test_collate_and_micro_batches():
    samples = build_samples([traj(0, [0.0, 1.0], ["a", "b"]), traj(0, [1.0], ["a"])], "trajectory")
    b = collate(samples, [0, 1], pad_id=7)
    assert b.ids.shape == (2, 7) and b.ids[1, 4:].tolist() == [7, 7, 7] and b.attention[1].sum() == 4
    assert sorted(sum(micro_batches(samples, [0, 1], 1), [])) == [0, 1]


def test_turn_advantages_broadcast_to_action_tokens():
    ts = [traj(0, [0.0, 1.0], ["a", "b"]), traj(0, [0.0], ["a"])]
    samples = build_samples(ts, "trajectory")
    table = TurnTable.from_trajectories(ts)
    scored = Scored([np.zeros(len(s) - 1) for s in samples], None, None)
    targets = build_targets(AlgorithmSection(estimator="grpo", norm="mean"), table, ts, samples, scored)
    # returns (1, 0): GRPO mean mode (+.5, -.5); shifted rows of sample 0: [-1, 0, 0, -1, 1, 1]
    np.testing.assert_allclose(targets.advantages[0], [0, 0.5, 0.5, 0, 0.5, 0.5])
    np.testing.assert_allclose(targets.advantages[1], [0, -0.5, -0.5])


@pytest.mark.parametrize("scale", [0.0, 0.25])
def test_negative_scale_shrinks_negative_advantages_once_on_every_path(scale):
    ts = [traj(0, [0.0, 1.0], ["a", "b"]), traj(0, [0.0], ["a"])]
    samples = build_samples(ts, "trajectory")
    table = TurnTable.from_trajectories(ts)
    scored = Scored([np.zeros(len(s) - 1) for s in samples], None, None)
    cfg = AlgorithmSection(estimator="grpo", norm="mean", negative_scale=scale)
    targets = build_targets(cfg, table, ts, samples, scored)
    # the worked example above: (+.5, -.5) -> (+.5, -.5 * scale), scaled once (not by scale squared)
    np.testing.assert_allclose(targets.advantages[0], [0, 0.5, 0.5, 0, 0.5, 0.5])
    np.testing.assert_allclose(targets.advantages[1], [0, -0.5 * scale, -0.5 * scale])
    # the choice updater reads per-turn advantages: the same numbers
    np.testing.assert_allclose(turn_advantages(cfg, table, ts), [0.5, 0.5, -0.5 * scale])
    # a critic estimator's too: turn_gae at gamma 1, lambda 0 with V = 2 before both turns: A = (0 + 2 - 2, 1 - 2)
    gae = [traj(0, [0.0, 1.0], ["a", "b"])]
    gae_samples = build_samples(gae, "trajectory")
    values = np.array([0.0, 2.0, 0.0, 0.0, 2.0, 0.0])
    gae_scored = Scored([np.zeros(6)], None, [values])
    for s, expect in ((1.0, -1.0), (scale, -1.0 * scale)):
        t = build_targets(AlgorithmSection(estimator="turn_gae", gamma=1.0, gae=GaeSection(lam=0.0), negative_scale=s),
                          TurnTable.from_trajectories(gae), gae, gae_samples, gae_scored)
        np.testing.assert_allclose(t.advantages[0][[1, 4]], [0.0, expect])


def test_negative_scale_outside_zero_to_one_is_refused():
    with pytest.raises(ConfigError, match="negative_scale must be in"):
        config_from_dict({}, ["algorithm.negative_scale=1.5"])


def test_turn_gae_reads_values_before_each_turn():
    ts = [traj(0, [0.0, 1.0], ["a", "b"])]
    samples = build_samples(ts, "trajectory")
    table = TurnTable.from_trajectories(ts)
    # shifted positions: turn 0's first action token (id 10, index 2) is predicted at position 1
    values = np.array([0.0, 0.5, 0.0, 0.0, 0.8, 0.0])
    scored = Scored([np.zeros(6)], None, [values])
    cfg = AlgorithmSection(estimator="turn_gae", gamma=0.9, gae=GaeSection(lam=0.5))
    t = build_targets(cfg, table, ts, samples, scored)
    # the turn_gae worked example: A = (.31, .2), returns (.81, 1.0), critic trained at positions 1 and 4
    np.testing.assert_allclose(t.advantages[0], [0, 0.31, 0.31, 0, 0.2, 0.2])
    np.testing.assert_allclose(t.value_mask[0], [0, 1, 0, 0, 1, 0])
    np.testing.assert_allclose(t.returns[0], [0, 0.81, 0, 0, 1.0, 0])


def test_bi_level_targets_cover_every_action_token():
    ts = [traj(0, [0.0, 1.0], ["a", "b"])]
    samples = build_samples(ts, "step")
    table = TurnTable.from_trajectories(ts)
    scored = Scored([np.zeros(len(s) - 1) for s in samples], None, [np.full(len(s) - 1, 0.5) for s in samples])
    t = build_targets(AlgorithmSection(estimator="bi_level_gae", gamma=1.0, gae=GaeSection(lam=1.0, lam_token=1.0)), table, ts,
                      samples, scored)
    # gamma = lambda = 1: A_j = (sum of later rewards) - V_j = 1 - .5 on every action token
    for a, m in zip(t.advantages, t.value_mask):
        np.testing.assert_allclose(a[m > 0], 0.5)


def test_dynamic_sampling_and_turn_cap_schedule():
    ts = [traj(0, [1.0], ["a"]), traj(0, [1.0], ["a"]), traj(1, [0.0], ["a"]), traj(1, [1.0], ["a"])]
    kept, dropped = keep_varied_groups(ts)
    assert dropped == 1 and [t.group_id for t in kept[0]] == [1, 1]
    cfg = config_from_dict({}, ["algorithm.turn_cap_schedule=[[0, 2], [3, 5]]", "rollout.max_turns=9"])
    assert [turn_cap(cfg, i) for i in (0, 2, 3, 10)] == [2, 2, 5, 5]
    assert turn_cap(config_from_dict({}, ["rollout.max_turns=9"]), 4) == 9


def test_dynamic_sampling_can_keep_equal_return_groups_whose_step_groups_differ():
    # group 0: equal returns by different paths (from state "a", "b" led to success in 2 turns and "c" in 3,
    # so GiGPO's step group at "a" ranks them); group 1: two identical plays; group 2: returns differ
    path_b, path_c = traj(0, [0.0, 1.0], ["a", "b"]), traj(0, [0.0, 0.0, 1.0], ["a", "c", "d"])
    same = [traj(1, [0.0, 1.0], ["a", "b"]) for _ in range(2)]
    varied = [traj(2, [1.0], ["a"]), traj(2, [0.0], ["a"])]
    ts = [path_b, path_c, *same, *varied]
    by_returns, dropped = keep_varied_groups(ts, AlgorithmSection(dynamic_sampling=True))
    assert dropped == 2 and [g[0].group_id for g in by_returns] == [2]
    by_advantages, dropped = keep_varied_groups(ts, AlgorithmSection(dynamic_sampling=True,
                                                                      dynamic_sampling_keep="advantages"))
    assert dropped == 1 and [g[0].group_id for g in by_advantages] == [0, 2]
    # GRPO's advantages are zero exactly where the returns are all equal: the two rules agree
    grpo = AlgorithmSection(estimator="grpo", dynamic_sampling=True, dynamic_sampling_keep="advantages")
    assert [g[0].group_id for g in keep_varied_groups(ts, grpo)[0]] == [2]


@pytest.mark.parametrize("overrides, fix", [
    (["algorithm.dynamic_sampling_keep=advantages"], "set algorithm.dynamic_sampling=true"),
    (["algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_keep=advantages", "algorithm.estimator=turn_gae",
      "model.critic=shared"], "set algorithm.dynamic_sampling_keep=returns"),
])
def test_dynamic_sampling_keep_is_refused_where_it_means_nothing(overrides, fix):
    with pytest.raises(ConfigError, match=fix):
        config_from_dict({}, overrides)


def test_anchor_texts_follow_table_codes():
    ts = [traj(0, [0.0, 1.0], ["a", "b"]), traj(0, [0.0], ["a"])]
    table = TurnTable.from_trajectories(ts)
    texts = anchor_texts(ts)
    assert [texts[c] for c in table.anchor] == ["a", "b", "a"]
