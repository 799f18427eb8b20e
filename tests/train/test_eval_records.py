"""The paired change between two periodic evals (pure)."""
from __future__ import annotations

from agentgym.train.eval_records import paired_by_iteration, paired_change, read_records


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


def test_paired_by_iteration_pairs_every_eval_with_the_start_not_with_the_previous_eval():
    start = [rec(s, "success" if s < 2 else "failure") for s in range(6)]  # solved: 0, 1
    row2 = [{**rec(s, "success" if s in (0, 2, 3) else "failure"), "iteration": 2} for s in range(6)]
    row5 = [{**rec(s, "success" if s in (0, 1, 2, 3, 4) else "failure"), "iteration": 5} for s in range(6)]
    out = paired_by_iteration(start, row2 + row5)
    assert sorted(out) == [2, 5]
    assert (out[2].newly_solved, out[2].newly_failed, out[2].tasks) == (2, 1, 6)
    # row 5 against the start (3 newly solved, none lost), not against row 2 (2 / 0)
    assert (out[5].newly_solved, out[5].newly_failed, out[5].both) == (3, 0, 2)
    assert out[5].p_value == 2 / 2 ** 3


def test_read_records_of_a_missing_file_is_empty(tmp_path):
    assert read_records(tmp_path / "eval_episodes.jsonl") == []
    (tmp_path / "e.jsonl").write_text('{"iteration": 0, "env": "E", "seed": 1, "outcome": "success"}\n\n')
    assert read_records(tmp_path / "e.jsonl") == [rec(1, "success")]
