"""benchmarks/update_mfu.py: the project's token-PPO step against a plain transformers step on the same samples,
with the model FLOPs each needs. On the CPU at a tiny shape (fp32); on a GPU (marked gpu) at SmolLM2-135M's
shape with bf16 autocast, the case the issue's MFU figures start from."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def update_mfu(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import update_mfu

    return update_mfu


def test_the_quick_run_times_both_steps_on_the_same_samples(update_mfu, capsys):
    results = update_mfu.main(["--quick", "--steps", "1", "--threads", "1"])
    printed = capsys.readouterr().out
    assert printed.count("| tiny:") == 4 and "the plain step's time" in printed
    by = {(r["case"], r["kind"]): r for r in results}
    padded_plain, padded_project = by[("tiny:padded:2x96", "plain")], by[("tiny:padded:2x96", "project")]
    packed_plain, packed_project = by[("tiny:packed:2x96", "plain")], by[("tiny:packed:2x96", "project")]
    # padded, every token a target: the same tokens; the project's head skips only the last position
    assert padded_plain["tokens"] == padded_project["tokens"] == 192
    assert padded_project["flops"] < padded_plain["flops"]
    # packed: a group's prompt runs once, so fewer tokens than the plain step's rows of the same samples
    assert packed_project["samples"] == packed_plain["samples"] >= 2
    assert packed_project["tokens"] < packed_plain["tokens"]
    for r in results:
        assert r["seconds"] > 0 and r["flops"] > 0 and 0 < r["mfu"] and math.isfinite(r["loss"])


def test_packed_samples_fill_the_budget_with_groups_sharing_a_prompt(update_mfu):
    case = update_mfu.Case.parse("tiny:packed:4x128")
    samples = update_mfu.samples_for(case, vocab=512)
    prompt = 128 // 8
    assert samples[0].ids[:prompt].tolist() == samples[1].ids[:prompt].tolist()     # one task, two plays
    fed = sum(len(s) - (prompt if k % 4 else 0) for k, s in enumerate(samples))
    assert fed <= 4 * 128 and all(81 <= len(s) <= 128 for s in samples)
    assert all((s.row[:prompt] < 0).all() and (s.row >= 0).any() for s in samples)  # prompts are never targets


@pytest.mark.parametrize("bad", ["tiny:padded", "nope:padded:1x64", "tiny:sparse:1x64", "tiny:packed:0x64"])
def test_a_bad_case_is_a_one_line_error(update_mfu, bad):
    with pytest.raises(SystemExit, match="SHAPE"):
        update_mfu.Case.parse(bad)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_both_steps_run_at_smollm2_shape_under_bf16_autocast(update_mfu, capsys):
    results = update_mfu.main(["--case", "smollm2-135m:packed:2x1024", "--steps", "2", "--peak-tflops", "989"])
    assert "bf16 autocast" in capsys.readouterr().out
    for r in results:
        assert 0 < r["mfu"] < 1 and r["memory_gb"] > 0 and math.isfinite(r["loss"])
