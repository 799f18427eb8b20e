"""The paired change between two periodic evals (pure)."""
from __future__ import annotations

from agentgym.train.eval_records import paired_change


def rec(seed: int, outcome: str, env: str = "E") -> dict:
    return {"iteration": 0, "env": env, "seed": seed, "outcome": outcome}


def test_paired_change_counts_only_tasks_both_evals_played():
    before = [rec(0, "success"), rec(1, "failure"), rec(2, "failure"), rec(3, "success"), rec(5, "success"),
              rec(6, "failure"), rec(9, "failure")]
    after = [rec(0, "failure"), rec(1, "success"), rec(2, "success"), rec(3, "error"), rec(5, "success"),
             rec(6, "failure"), rec(4, "success"), rec(9, "success", env="other")]
    out = paired_change(before, after)
    # seed 4 and env "other" were not played by both; an errored episode counts as unsolved; 5 and 6 agree
    assert out["eval/newly_solved"] == 2 and out["eval/newly_failed"] == 2
    assert out["eval/paired_p"] == 1.0


def test_paired_change_p_value_falls_with_a_one_sided_change():
    before = [rec(s, "failure") for s in range(8)]
    after = [rec(s, "success") for s in range(8)]
    out = paired_change(before, after)
    assert (out["eval/newly_solved"], out["eval/newly_failed"]) == (8, 0)
    assert out["eval/paired_p"] == 2 / 2 ** 8
