"""Issue 51 defect 9: the learning benchmark's interval respects tasks x seeds (a bootstrap over held-out tasks,
every seed kept), where the pooled Wilson interval took three seeds' plays of one task for independent trials."""
from __future__ import annotations

import random

from agentgym.eval.metrics import wilson_interval
from agentgym.train.eval_records import solved_by_iteration, task_bootstrap_interval

TASKS = [("E", s) for s in range(64)]


def nested(counts: tuple[int, ...]) -> list[dict]:
    """Seeds that solve 42, 34, 48 of the same 64 tasks, the easier tasks first (as seeds of one checkpoint do)."""
    order = TASKS[:]
    random.Random(0).shuffle(order)
    return [{t: t in set(order[:k]) for t in TASKS} for k in counts]


def test_correlated_seeds_get_a_wider_interval_than_pooled_wilson():
    runs = nested((42, 34, 48))
    low, high = task_bootstrap_interval(runs)
    w_low, w_high = wilson_interval(42 + 34 + 48, 3 * 64)   # the old "pooled Wilson": 58-71%
    assert (round(w_low, 2), round(w_high, 2)) == (0.58, 0.71)
    assert low < w_low - 0.02 and high > w_high + 0.02      # 54-74%: the seeds share their tasks
    assert low < (42 + 34 + 48) / 192 < high


def test_copies_of_one_seed_add_no_information():
    one = nested((42,))
    assert task_bootstrap_interval(one * 3) == task_bootstrap_interval(one)
    w3, w1 = wilson_interval(126, 192), wilson_interval(42, 64)
    assert w3[1] - w3[0] < 0.75 * (w1[1] - w1[0])            # pooling pretended three times the evidence


def test_only_tasks_every_seed_played_count_and_nothing_gives_nan():
    a = {("E", 0): True, ("E", 1): True, ("E", 2): False}
    b = {("E", 0): True, ("E", 1): True}
    assert task_bootstrap_interval([a, b]) == (1.0, 1.0)      # task 2 was not played by seed b
    low, high = task_bootstrap_interval([])
    assert low != low and high != high


def test_solved_by_iteration_reads_each_eval():
    records = [{"iteration": 2, "env": "E", "seed": 0, "outcome": "success"},
               {"iteration": 2, "env": "E", "seed": 1, "outcome": "error"},
               {"iteration": 5, "env": "E", "seed": 0, "outcome": "failure"}]
    assert solved_by_iteration(records) == {2: {("E", 0): True, ("E", 1): False}, 5: {("E", 0): False}}


def test_the_benchmark_table_uses_the_tasks_x_seeds_interval(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import learning_household

    runs = nested((42, 34, 48))
    mean, lo_seed, hi_seed, low, high = learning_household.summarise([42 / 64, 34 / 64, 48 / 64], runs)
    assert (round(mean, 3), lo_seed, hi_seed) == (0.646, 34 / 64, 48 / 64)
    assert (low, high) == task_bootstrap_interval(runs) and high - low > 0.18  # pooled Wilson's was 0.13 wide
