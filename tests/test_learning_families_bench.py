"""benchmarks/learning.py --family NAME end to end on a tiny random model: the family's preset, its start
evaluated once, each seed's RL run paired with it, the tasks x seeds interval and the PNG."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two tiny RL runs on search with their evals

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TINY_RUN = ["model.train_layers=2", "rollout.groups=1", "rollout.group_size=2", "rollout.max_turns=2",
            "rollout.env_workers=1", "eval.seeds=3", "train.torch_threads=1"]


def test_family_benchmark_runs_the_family_preset(monkeypatch, tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning_household

    from agentgym.train import tiny

    ckpt = tiny.build_tiny(tmp_path / "tiny", layers=4, hidden=64)
    out = tmp_path / "bench"
    learning_household.main(["--family", "search", "--sft-checkpoint", str(ckpt), "--iterations", "1",
                             "--seeds", "0", "1", "--out", str(out), *TINY_RUN])
    printed = capsys.readouterr().out
    start = [json.loads(line) for line in (out / "generate" / "sft_eval_episodes.jsonl").read_text().splitlines()]
    assert {r["env"] for r in start} == {"agentgym/Search-1Hop-v0"}  # search_cpu's env, its free-text mode
    assert "search (search_cpu): held-out greedy success on 3 tasks" in printed
    assert "95% bootstrap over tasks, seeds kept" in printed and "gigpo/generate seed 1: it0=" in printed
    assert (out / "search_success_vs_iteration.png").stat().st_size > 0
    # --report reads the runs back without training: the same table; a seed never trained is refused
    table = printed[printed.index("search (search_cpu)"):printed.index("plot:")]
    learning_household.main(["--family", "search", "--sft-checkpoint", str(ckpt), "--iterations", "1",
                             "--seeds", "0", "1", "--out", str(out), "--report", *TINY_RUN])
    again = capsys.readouterr().out
    assert again[again.index("search (search_cpu)"):again.index("plot:")] == table
    with pytest.raises(SystemExit, match="no finished 1-iteration run of seed 2 in"):
        learning_household.main(["--family", "search", "--sft-checkpoint", str(ckpt), "--iterations", "1",
                                 "--seeds", "2", "--out", str(out), "--report", *TINY_RUN])
    with pytest.raises(SystemExit, match="--report trains nothing: give --sft-checkpoint"):
        learning_household.main(["--family", "search", "--iterations", "1", "--seeds", "0", "--out",
                                 str(tmp_path / "nothing"), "--report", *TINY_RUN])
    assert not (tmp_path / "nothing").exists()


def test_learning_py_dispatches_family(monkeypatch):
    import runpy
    import sys

    monkeypatch.setattr(sys, "argv", ["learning.py", "--family", "nope"])
    with pytest.raises(SystemExit) as err:  # argparse of learning_household refuses an unknown family
        runpy.run_path(str(BENCHMARKS / "learning.py"), run_name="__main__")
    assert err.value.code == 2
