"""Paired comparison of two eval runs: counts per task and the exact McNemar test, by hand."""
from __future__ import annotations

import math

import pytest

from agentgym.eval.paired import mcnemar_exact, paired, paired_rows, summary_lines


def run(successes: list[bool], env: str = "agentgym/Toy-KeyDoor-v0") -> dict:
    return {"trajectories": [{"env": env, "seed": i, "sample": 0, "trajectory": {"success": s}}
                             for i, s in enumerate(successes)]}


def test_mcnemar_by_hand():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)          # 2 * (1/2)^5
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(8, 1) == pytest.approx(2 * (1 + 9) / 512)  # 2 * P(X <= 1), X ~ Bin(9, 1/2)
    assert mcnemar_exact(10, 2) == pytest.approx(2 * sum(math.comb(12, k) for k in range(3)) / 4096)


def test_paired_counts_only_shared_episodes():
    sft = run([True, False, False, True, False])
    rl = run([True, True, True, False])  # seed 4 missing from the second run: not compared
    p = paired(("sft", sft), ("rl", rl))
    assert (p.tasks, p.both, p.neither, p.newly_solved, p.newly_failed) == (4, 1, 0, 2, 1)
    assert p.change_pts == pytest.approx(25.0) and p.p_value == pytest.approx(1.0)
    header, rows = paired_rows([("base", run([False] * 5)), ("sft", sft), ("rl", rl)])
    assert [r[0] for r in rows] == ["base → sft", "sft → rl"] and rows[0][3] == "2 / 0"


def test_console_summary_gives_intervals_and_the_paired_test():
    base, sft = run([False] * 4), run([True, False, False, False, True, False, False, False])
    rl = run([True, True, True, True, True, True, True, False])
    lines = summary_lines([("base", base), ("sft", sft), ("sft+gigpo", rl)])
    assert lines[0].startswith("base") and "0/4" in lines[0] and "(Wilson 95%: 0.0-49.0%)" in lines[0]
    assert "2/8" in lines[1] and "25.0%" in lines[1] and "7/8" in lines[2]
    assert lines[3] == ("base -> sft: 4 shared tasks, newly solved 1, newly failed 0 (+25.0 pts), exact McNemar "
                        "p = 1")
    p = mcnemar_exact(5, 0)
    assert lines[4] == (f"sft -> sft+gigpo: 8 shared tasks, newly solved 5, newly failed 0 (+62.5 pts), exact "
                        f"McNemar p = {p:.3g}")


def test_compare_page_and_markdown_carry_the_paired_table(tmp_path):
    """Two real evals of the same tasks (a random policy, then the oracle) paired on the compare page."""
    from agentgym.eval.runner import EvalConfig, run_eval
    from agentgym.eval.suites import resolve_envs
    from agentgym.eval.writer import write_comparison

    entries = tuple(e for e in resolve_envs(suite_name="toy")[1] if "Calculator" not in e.env_id)
    runs = [run_eval(EvalConfig(policy=policy, entries=entries, out_dir=str(tmp_path / policy), suite="custom",
                                episodes=4, samples=1, temperature=1.0), progress=False)
            for policy in ("random", "oracle")]
    paths = write_comparison([r.config.out_dir for r in runs], tmp_path / "cmp", ["random", "oracle"])
    md, html = open(paths["markdown"]).read(), open(paths["html"]).read()
    row = next(line for line in md.splitlines() if line.startswith("| random → oracle |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    tasks = 4 * len(entries)
    solved, failed = (int(x) for x in cells[3].split(" / "))
    assert cells[1] == str(tasks) and failed == 0 and solved >= 1  # the oracle solves what random solved
    assert float(cells[5]) == pytest.approx(mcnemar_exact(solved, failed), rel=1e-2)
    assert 'id="paired"' in html and "random → oracle" in html
