"""benchmarks/rl_throughput.py --quick end to end on a tiny random model: one rollout, today's and the shortcut
update of the same batch side by side; the shortcut runs fewer tokens and FLOPs an episode, skips the
reference's pass only at the first update, and moves the weights as today's update does."""
from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ~20 s: a tiny rollout and four updates

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_quick_benchmark_prints_both_settings_and_the_shortcut_is_exact(monkeypatch, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import rl_throughput

    out = rl_throughput.main(["--quick", "--iterations", "3"])
    printed = capsys.readouterr().out
    assert "today:" in printed and "shortcut:" in printed and "reference" in printed
    first, later = out["first"], out["later"]
    assert first["shortcut"]["update/reference_reused"] == 1 and later["shortcut"]["update/reference_reused"] == 0
    assert first["today"]["update/reference_reused"] == 0
    for m in (first, later):
        assert m["shortcut"]["update/tflop"] < m["today"]["update/tflop"]
        assert m["shortcut"]["update/tokens"] <= m["today"]["update/tokens"]
    # AdamW's first step moves each element by ~lr whatever its gradient's size, so rounding in near-zero
    # gradient elements shows up at a fraction of lr (measured: 3.5% of the step)
    assert out["weight_diff"] < 0.1 * out["step"]
    assert set(out["rates"]) == {"today", "shortcut"} and min(out["rates"].values()) > 0
    assert "ceiling:" in printed and out["matmul_gflops"] > 0
    # the ceiling counts the same FLOPs at the best matrix-product rate and nothing else: above the measured rate,
    # and higher for the shortcut (fewer FLOPs an episode)
    for name in ("today", "shortcut"):
        assert out["ceilings"][name] > out["rates"][name]
    assert out["ceilings"]["shortcut"] > out["ceilings"]["today"]
