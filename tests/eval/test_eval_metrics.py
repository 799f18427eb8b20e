"""Metrics against hand-computed values and the exact binomial formula."""
from fractions import Fraction
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.eval.metrics import (compute_metrics, macro_success, mean_pass_at_k, pass_at_k, pass_ks,
                                   task_counts, wilson_interval)


@pytest.mark.parametrize("n,c,k,expected", [
    (5, 0, 1, 0.0),
    (5, 5, 3, 1.0),
    (5, 2, 1, 0.4),                      # pass@1 is the plain success rate
    (5, 2, 2, 0.7),                      # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (4, 1, 2, 0.5),                      # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (10, 3, 5, 1 - 21 / 252),            # 1 - C(7,5)/C(10,5)
    (10, 1, 10, 1.0),                    # k = n with one success: certain
    (3, 1, 3, 1.0),
    (6, 2, 4, 1 - 1 / 15),               # C(4,4)/C(6,4) = 1/15
])
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_exact_binomial_formula(nck):
    n, c, k = nck
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-9)


def test_pass_at_k_is_stable_where_binomials_overflow_floats():
    # C(2000, 1000) ~ 1e600 would overflow a float; the product form does not
    value = pass_at_k(2000, 3, 1000)
    assert value == pytest.approx(float(1 - Fraction(comb(1997, 1000), comb(2000, 1000))), abs=1e-12)


@pytest.mark.parametrize("n,c,k", [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_tasks_and_needs_k_samples():
    assert mean_pass_at_k([(4, 1), (4, 0), (4, 4)], 2) == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert mean_pass_at_k([(4, 1), (1, 0)], 2) is None
    assert pass_ks(1) == [1] and pass_ks(4) == [1, 2, 4] and pass_ks(6) == [1, 2, 4, 6]


@pytest.mark.parametrize("s,n,low,high", [
    (5, 10, 0.2366, 0.7634),             # textbook values for 5/10 at 95%
    (0, 10, 0.0, 0.2775),
    (10, 10, 0.7225, 1.0),
    (81, 263, 0.2553, 0.3662),           # Wilson (1927)-style worked example, 95%
])
def test_wilson_interval_matches_reference_values(s, n, low, high):
    lo, hi = wilson_interval(s, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_contains_the_estimate_and_stays_in_unit_interval(sn):
    s, n = sn
    lo, hi = wilson_interval(s, n)
    assert 0.0 <= lo <= s / n <= hi <= 1.0


def test_wilson_interval_without_data_is_uninformative():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_compute_metrics_on_real_episodes(episodes):
    env = "agentgym/Toy-KeyDoor-v0"
    good = [episodes.play(env, seed, episodes.oracle, sample=s) for seed in (1, 2) for s in (0, 1)]
    bad = [episodes.play(env, 3, episodes.always("dance"), sample=s) for s in (0, 1)]
    m = compute_metrics(good + bad)
    assert (m.episodes, m.tasks, m.successes) == (6, 3, 4)
    assert m.success_rate == pytest.approx(4 / 6)
    assert (m.success_ci_low, m.success_ci_high) == pytest.approx(wilson_interval(4, 6))
    assert m.pass_at_k == pytest.approx({"1": 4 / 6, "2": 2 / 3})
    assert m.mean_return == pytest.approx(sum(t.total_reward for t in good + bad) / 6)
    turns = sum(t.num_turns for t in good + bad)
    assert m.mean_turns == pytest.approx(turns / 6)
    # every "dance" turn is invalid, every oracle turn valid
    assert m.invalid_action_rate == pytest.approx(sum(t.num_turns for t in bad) / turns)
    assert m.mean_response_tokens == 3 * turns / 6
    assert m.end_reasons == {"terminated": 4, "truncated": 2}
    assert m.errors == 0 and m.tool_calls == 0


def test_task_keys_keep_same_seed_of_different_envs_apart(episodes):
    a = episodes.play("agentgym/Toy-KeyDoor-v0", 1, episodes.oracle)
    b = episodes.play("agentgym/Toy-KeyDoor-v0", 1, episodes.always("dance"))
    assert task_counts([a, b]) == [(2, 1)]
    assert sorted(task_counts([a, b], ["x", "y"])) == [(1, 0), (1, 1)]
    empty = compute_metrics([])
    assert empty.episodes == 0 and empty.success_rate == 0.0 and empty.pass_at_k == {}
    assert macro_success({"a": compute_metrics([a]), "b": compute_metrics([b])}) == 0.5
