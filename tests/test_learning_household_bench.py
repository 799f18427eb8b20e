"""benchmarks/learning.py --household end to end on a tiny random model: the SFT checkpoint is evaluated
once, shared by every run, and each run's evals are paired with it task by task."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ~11 s: two tiny RL runs with their evals

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TINY_RUN = ["model.train_layers=2", "rollout.groups=1", "rollout.group_size=2", "rollout.max_turns=2",
            "rollout.env_workers=1", "eval.seeds=3", "train.torch_threads=1"]


@pytest.fixture()
def bench(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning_household

    return learning_household


def test_household_benchmark_pairs_every_run_with_the_one_sft_eval(bench, tmp_path, capsys):
    from agentgym.train import tiny

    ckpt = tiny.build_tiny(tmp_path / "tiny", layers=4, hidden=64)
    out = tmp_path / "bench"
    bench.main(["--household", "--sft-checkpoint", str(ckpt), "--iterations", "1", "--seeds", "0", "1",
                "--estimators", "gigpo", "--out", str(out), *TINY_RUN])
    printed = capsys.readouterr().out
    start = [json.loads(line) for line in (out / "admissible" / "sft_eval_episodes.jsonl").read_text().splitlines()]
    assert len(start) == 3 and {r["start"]["checkpoint"] for r in start} == {str(ckpt)}
    for seed in (0, 1):
        runs = [json.loads(line) for line in
                (out / "admissible" / f"gigpo-seed{seed}" / "eval_episodes.jsonl").read_text().splitlines()]
        assert [r["seed"] for r in runs] == [r["seed"] for r in start]  # the same held-out tasks
        solved = sum(r["outcome"] == "success" for r in runs)
        assert f"gigpo/admissible seed {seed}: it0={sum(r['outcome'] == 'success' for r in start) / 3:.2f} " \
               f"it1={solved / 3:.2f}  vs SFT it1 +" in printed
    assert "paired with the SFT checkpoint on the same tasks" in printed
    assert "gigpo/admissible it1: s0 +" in printed and "significant gains" in printed


def test_household_benchmark_refuses_to_append_to_an_earlier_run(bench, tmp_path):
    from agentgym.errors import ConfigError

    run_dir = tmp_path / "admissible" / "gigpo-seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="already holds a run"):
        bench.rl_curve("gigpo", 0, "unused", 1, 1, tmp_path / "admissible", [])
