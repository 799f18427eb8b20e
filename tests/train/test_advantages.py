"""Worked examples (numbers computed by hand in the comments) and invariants of train/estimators/advantages.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.train.estimators import advantages as adv
from agentgym.trajectory import TurnTable

S3 = np.sqrt(1 / 3)  # unbiased std of (1, 1, 0)


def table(rows):
    """rows: (group, traj, turn, anchor, reward[, valid])"""
    cols = list(zip(*rows))
    valid = cols[5] if len(cols) > 5 else None
    return TurnTable.from_columns(cols[0], cols[1], cols[2], cols[3], cols[4], valid)


def gigpo_example():
    # group 0: traj 0 = s0 -> s1 -> win; traj 1 = s0 -> s2 -> s1 -> win; traj 2 = s0, fails.
    # group 1 (another task) reuses the anchor name "s0": its turns must not join group 0's step group.
    return table([
        (0, 0, 0, "s0", 0.0), (0, 0, 1, "s1", 1.0),
        (0, 1, 0, "s0", 0.0), (0, 1, 1, "s2", 0.0), (0, 1, 2, "s1", 1.0),
        (0, 2, 0, "s0", 0.0),
        (1, 3, 0, "s0", 1.0), (1, 4, 0, "s0", 1.0),
    ])


def test_grpo_worked_example():
    # group 0 returns (1, 0): mean .5, unbiased std sqrt(.5) -> ±.5/.7071 = ±.70711; group 1 (1, 1) -> 0
    t = table([(0, 0, 0, "a", 0.0), (0, 0, 1, "b", 1.0), (0, 1, 0, "a", 0.0),
               (1, 2, 0, "a", 1.0), (1, 3, 0, "a", 0.0), (1, 3, 1, "c", 1.0)])
    np.testing.assert_allclose(adv.grpo(t, eps=0.0), [0.70711, 0.70711, -0.70711, 0, 0, 0], atol=1e-5)
    np.testing.assert_allclose(adv.grpo(t, mode="mean"), [0.5, 0.5, -0.5, 0, 0, 0])
    # per-turn statistics: group 0 rows carry (1, 1, 0): mean 2/3, std sqrt(1/3)
    np.testing.assert_allclose(adv.grpo(t, eps=0.0, episode_stats="turn"),
                               [1 / 3 / S3, 1 / 3 / S3, -2 / 3 / S3, 0, 0, 0], atol=1e-12)
    assert np.all(adv.grpo(t)[3:] == 0.0)  # exactly, not float noise


def test_gigpo_worked_example_mean_mode():
    t = gigpo_example()
    a_ep, a_step = adv.gigpo_parts(t, gamma=0.5, mode="mean")
    # episode returns (1, 1, 0): mean 2/3
    np.testing.assert_allclose(a_ep[:6], [1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, -2 / 3])
    # step returns: traj0 (.5, 1), traj1 (.25, .5, 1), traj2 (0); s0 = {.5, .25, 0} mean .25,
    # s1 = {1, 1} -> 0, s2 = {.5} alone -> 0; group 1 is constant -> 0
    np.testing.assert_allclose(a_step, [0.25, 0, 0, 0, 0, -0.25, 0, 0])
    np.testing.assert_allclose(adv.gigpo(t, gamma=0.5, w=2.0, mode="mean"),
                               a_ep + 2.0 * np.array([0.25, 0, 0, 0, 0, -0.25, 0, 0]))


def test_gigpo_worked_example_mean_std_mode():
    t = gigpo_example()
    # episode: (1, 1, 0) -> (.57735, .57735, -1.1547); s0 step returns (.5, .25, 0): std .25 -> (1, 0, -1)
    out = adv.gigpo(t, gamma=0.5, eps=0.0)
    e = 1 / 3 / S3
    np.testing.assert_allclose(out, [e + 1, e, e, e, e, -2 * e - 1, 0, 0], atol=1e-12)
    assert out[6] == 0.0 and out[7] == 0.0


def test_gigpo_episode_stats_turn_weighs_turns():
    t = gigpo_example()
    # rows of group 0 carry returns (1,1, 1,1,1, 0): mean 5/6, unbiased std sqrt((5*(1/36)+25/36)/5) = sqrt(1/6)
    a_ep, _ = adv.gigpo_parts(t, gamma=0.5, eps=0.0, episode_stats="turn")
    s = np.sqrt(1 / 6)
    np.testing.assert_allclose(a_ep[:6], [1 / 6 / s] * 5 + [-5 / 6 / s], atol=1e-12)


def test_invalid_penalty_lowers_the_invalid_turn():
    t = table([(0, 0, 0, "s", 0.0, False), (0, 0, 1, "s", 1.0, True), (0, 1, 0, "s", 0.0, True),
               (0, 1, 1, "x", 1.0, True)])
    # with p = .5, gamma 1: step returns traj0 (.5, 1), traj1 (1, 1); anchor s = {.5, 1, 1}: mean 5/6
    _, a_step = adv.gigpo_parts(t, gamma=1.0, mode="mean", invalid_penalty=0.5)
    np.testing.assert_allclose(a_step, [0.5 - 5 / 6, 1 - 5 / 6, 1 - 5 / 6, 0.0])
    a_ep, _ = adv.gigpo_parts(t, gamma=1.0, mode="mean", invalid_penalty=0.5)
    np.testing.assert_allclose(a_ep, [-0.25, -0.25, 0.25, 0.25])  # returns (.5, 1)


def test_rloo_worked_example():
    t = table([(0, 0, 0, "a", 1.0), (0, 1, 0, "a", 0.0), (0, 2, 0, "a", 0.0), (1, 3, 0, "a", 1.0)])
    # A_0 = 1 - (0+0)/2 = 1, A_1 = 0 - (1+0)/2 = -.5; a group of one -> 0
    np.testing.assert_allclose(adv.rloo(t), [1.0, -0.5, -0.5, 0.0])


def test_reinforce_pp_worked_example():
    t = table([(0, 0, 0, "a", 0.0), (0, 0, 1, "b", 1.0), (0, 1, 0, "a", 0.0)])
    # gamma .5: returns-to-go traj0 (.5, 1), traj1 (0); group mean(1, 0) = .5, discounted by the turns left
    # like the returns: baselines (.25, .5, .5) -> x = (.25, .5, -.5); then batch whitening
    x = np.array([0.25, 0.5, -0.5])
    np.testing.assert_allclose(adv.reinforce_pp(t, gamma=0.5, eps=0.0), (x - x.mean()) / x.std(ddof=1), atol=1e-12)
    # no baseline, gamma 1: x = (1, 1, 0) -> (.57735, .57735, -1.1547)
    np.testing.assert_allclose(adv.reinforce_pp(t, baseline="none", eps=0.0),
                               [1 / 3 / S3, 1 / 3 / S3, -2 / 3 / S3], atol=1e-12)


def test_turn_gae_worked_example():
    t = table([(0, 0, 0, "a", 0.0), (0, 0, 1, "b", 1.0), (0, 1, 0, "a", 0.0)])
    # traj0: d1 = 1 - .8 = .2; d0 = 0 + .9*.8 - .5 = .22; A0 = .22 + .9*.5*.2 = .31; traj1: d = -.3
    a, ret = adv.turn_gae(t, np.array([0.5, 0.8, 0.3]), gamma=0.9, lam=0.5)
    np.testing.assert_allclose(a, [0.31, 0.2, -0.3])
    np.testing.assert_allclose(ret, [0.81, 1.0, 0.0], atol=1e-12)


def test_bi_level_gae_worked_example():
    t = table([(0, 0, 0, "a", 0.0), (0, 0, 1, "b", 1.0)])
    # turn 0 has tokens with values (.5, .6), turn 1 one token (.8); gamma_turn .9, lam_turn .5, lam_token .5
    # tok2: 1 - .8 = .2; tok1: .9*.8 - .6 = .12, A = .12 + .45*.2 = .21; tok0: .6-.5 = .1, A = .1 + .5*.21
    a, ret = adv.bi_level_gae(t, [0, 0, 1], [0.5, 0.6, 0.8], gamma_turn=0.9, lam_turn=0.5, lam_token=0.5)
    np.testing.assert_allclose(a, [0.205, 0.21, 0.2])
    np.testing.assert_allclose(ret, [0.705, 0.81, 1.0])


# ---------------------------------------------------------------------------------------------- invariants

@st.composite
def tables(draw):
    rows, traj = [], 0
    for g in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(1, 5))):
            for k in range(draw(st.integers(1, 6))):
                rows.append((g, traj, k, draw(st.integers(0, 3)), draw(st.sampled_from([0.0, 0.1, 1.0, -0.3])),
                             draw(st.booleans())))
            traj += 1
    return table(rows)


@settings(max_examples=60, deadline=None)
@given(tables(), st.sampled_from([0.5, 0.95, 1.0]))
def test_gigpo_step_groups_sum_to_zero_in_mean_mode(t, gamma):
    _, a_step = adv.gigpo_parts(t, gamma=gamma, mode="mean", invalid_penalty=0.1)
    key = t.group * 100 + t.anchor
    for k in np.unique(key):
        members = a_step[key == k]
        assert abs(members.sum()) < 1e-9
        if len(members) == 1:
            assert members[0] == 0.0


@settings(max_examples=60, deadline=None)
@given(tables(), st.sampled_from(["mean", "mean_std"]), st.sampled_from(["trajectory", "turn"]))
def test_groups_never_cross_tasks(t, mode, stats):
    full = adv.gigpo(t, mode=mode, episode_stats=stats)
    for g in np.unique(t.group):
        m = t.group == g
        sub = TurnTable(t.group[m], t.traj[m], t.turn[m], t.anchor[m], t.reward[m], t.valid[m])
        np.testing.assert_array_equal(adv.gigpo(sub, mode=mode, episode_stats=stats), full[m])


@settings(max_examples=40, deadline=None)
@given(tables())
def test_row_order_does_not_matter(t):
    perm = np.random.default_rng(0).permutation(len(t))
    shuffled = TurnTable(t.group[perm], t.traj[perm], t.turn[perm], t.anchor[perm], t.reward[perm], t.valid[perm])
    # a step group of equal returns normalises rounding noise (~1e-16, summation order) by std + eps = 1e-6
    np.testing.assert_allclose(adv.gigpo(shuffled), adv.gigpo(t)[perm], atol=1e-8)
    np.testing.assert_allclose(adv.reinforce_pp(shuffled), adv.reinforce_pp(t)[perm], atol=1e-12)
    values = np.linspace(0, 1, len(t))
    np.testing.assert_allclose(adv.turn_gae(shuffled, values[perm], 0.9, 0.8)[0],
                               adv.turn_gae(t, values, 0.9, 0.8)[0][perm], atol=1e-12)


@pytest.mark.parametrize("value", [0.1, 1.0, -0.3, 1 / 3])
def test_constant_groups_are_exactly_zero(value):
    n = 7
    t = table([(0, i, 0, "s", value) for i in range(n)])
    for fn in (adv.grpo, adv.rloo, lambda tb: adv.gigpo(tb, mode="mean"), adv.gigpo):
        assert np.all(fn(t) == 0.0)
    assert np.all(adv.group_normalize(np.full(5, value), np.zeros(5, dtype=int)) == 0.0)


@settings(max_examples=40, deadline=None)
@given(tables())
def test_bi_level_gae_with_one_token_per_turn_is_turn_gae(t):
    values = np.cos(np.arange(len(t)))
    a_turn, _ = adv.turn_gae(t, values, gamma=0.9, lam=0.7)
    a_bi, _ = adv.bi_level_gae(t, np.arange(len(t)), values, gamma_turn=0.9, lam_turn=0.7, lam_token=0.3)
    np.testing.assert_allclose(a_bi, a_turn, atol=1e-12)


def test_similarity_grouping_merges_near_identical_anchors():
    t = table([(0, 0, 0, 0, 1.0), (0, 1, 0, 1, 0.0), (0, 2, 0, 2, 0.0)])
    texts = ["You are in room 1. The key is here.", "You are in room 1. The key is here!", "A totally different place"]
    # anchors 0 and 1 merge at threshold .9: step group {1, 0} -> (.5, -.5); anchor 2 alone -> 0
    _, a_step = adv.gigpo_parts(t, gamma=1.0, mode="mean", anchors=adv.similar_anchor_codes(t, texts, 0.9))
    np.testing.assert_allclose(a_step, [0.5, -0.5, 0.0])
    out = adv.gigpo(t, gamma=1.0, mode="mean", w=1.0, anchor_text=texts, similarity=0.9)
    np.testing.assert_allclose(out, [2 / 3 + 0.5, -1 / 3 - 0.5, -1 / 3])
    with pytest.raises(ValueError, match="anchor_text"):
        adv.gigpo(t, similarity=0.9)


def test_bad_modes_raise():
    t = gigpo_example()
    with pytest.raises(ValueError, match="mode"):
        adv.gigpo(t, mode="std")
    with pytest.raises(ValueError, match="episode_stats"):
        adv.grpo(t, episode_stats="group")


def test_reinforce_pp_long_successful_episode_is_above_its_baseline():
    """50 turns, success (1) on the last, against a failed episode: every turn of the successful one gets a
    positive advantage. An undiscounted group baseline (0.5) subtracted from returns-to-go discounted over 49
    turns (0.95^49 = 0.08) made its early turns negative."""
    rows = [(0, 0, k, f"s{k}", float(k == 49)) for k in range(50)] + [(0, 1, k, f"f{k}", 0.0) for k in range(50)]
    a = adv.reinforce_pp(table(rows), gamma=0.95)
    assert (a[:50] > 0).all() and (a[50:] < 0).all()
