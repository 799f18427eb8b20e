"""benchmarks/faults.py: the fault campaign's readers (where a kill landed, episodes lost or twice, weight
differences) on constructed run dirs, and a small campaign end to end (slow): SIGKILLed runs resume to the
unkilled run's exact weights."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def faults(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import faults as module

    return module


def _write_rows(path: Path, iterations: list[int]) -> None:
    path.write_text("".join(json.dumps({"iteration": i, "seed": i}) + "\n" for i in iterations))


def test_where_a_kill_landed_is_read_from_the_run_dir(faults, tmp_path):
    launched = time.time() - 1
    assert faults.landed(tmp_path, launched) == "startup"  # no config.json written by this launch yet
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "latest").write_text("ckpt-2")
    _write_rows(tmp_path / "metrics.jsonl", [0, 1])
    _write_rows(tmp_path / "rollouts.jsonl", [0, 1])
    assert faults.landed(tmp_path, launched) == "rollout" and faults.under_way(tmp_path) == 3
    _write_rows(tmp_path / "rollouts.jsonl", [0, 1, 2])
    assert faults.landed(tmp_path, launched) == "update"
    _write_rows(tmp_path / "metrics.jsonl", [0, 1, 2])
    assert faults.landed(tmp_path, launched) == "checkpoint" and faults.under_way(tmp_path) == 3
    (tmp_path / ".tmp-ckpt-3").mkdir()
    assert faults.landed(tmp_path, launched) == "checkpoint" and faults.under_way(tmp_path) == 3
    old = time.time() + 60  # config.json older than this launch: it was still starting
    assert faults.landed(tmp_path.parent / "absent", old) == "startup"
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"iteration": 3, "cut sh')  # a line cut by the kill is not a row
    assert len(faults.rows(tmp_path / "metrics.jsonl")) == 3


def test_episodes_lost_and_trained_twice(faults):
    reference = Counter({"a": 1, "b": 1, "c": 1})
    assert faults.episodes_lost_and_twice(reference, Counter({"a": 1, "b": 1, "c": 1})) == (0, 0)
    assert faults.episodes_lost_and_twice(reference, Counter({"a": 1, "b": 2})) == (1, 1)


def test_weight_difference(faults):
    torch = pytest.importorskip("torch")
    a = {"w": torch.zeros(2, 2), "b": torch.ones(3)}
    assert faults.weight_difference(a, {k: v.clone() for k, v in a.items()}) == 0.0
    assert faults.weight_difference(a, {"w": torch.zeros(2, 2), "b": torch.tensor([1.0, 1.5, 1.0])}) == 0.5
    assert faults.weight_difference(a, {"w": torch.zeros(2, 2)}) == float("inf")


def test_corrupting_needs_an_older_checkpoint_to_fall_back_on(faults, tmp_path):
    import random

    (tmp_path / "ckpt-1").mkdir()
    (tmp_path / "ckpt-1" / "trainer.pt").write_bytes(b"\x00" * 8)
    assert faults.corrupt_newest(tmp_path, random.Random(0)) is None
    for n in (2,):
        (tmp_path / f"ckpt-{n}" / "model").mkdir(parents=True)
        (tmp_path / f"ckpt-{n}" / "trainer.pt").write_bytes(b"\x00" * 8)
        (tmp_path / f"ckpt-{n}" / "model" / "model.safetensors").write_bytes(b"\x00" * 8)
    hit = faults.corrupt_newest(tmp_path, random.Random(0))
    assert hit is not None and hit.startswith("ckpt-2/")
    assert (tmp_path / hit).read_bytes() != b"\x00" * 8 and (tmp_path / "ckpt-1" / "trainer.pt").read_bytes() == \
        b"\x00" * 8


@pytest.mark.slow
def test_a_small_campaign_resumes_every_killed_run_exactly():
    """6 SIGKILLs over 3-iteration runs of the tiny model, one trial followed by a corrupted checkpoint."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "faults.py"), "--faults", "6", "--iterations", "3",
                           "--kills-per-trial", "3", "--corrupt-share", "0.3", "--seed", "1"],
                          capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"faults injected: 6 SIGKILLs", out), out
    exact = re.search(r"resumes exact: (\d+) of (\d+) trials", out)
    assert exact and exact.group(1) == exact.group(2), out
    assert "episodes lost: 0; trained twice: 0" in out, out
