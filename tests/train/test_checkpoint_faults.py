"""Checkpoints under faults (issue 51): written atomically (a torn one is never loaded), checked on resume (a
corrupted file is refused with its reason and the previous checkpoint used), and a full disk during a write
stops the run with one line while the last good checkpoint stays whole."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.train import checkpoint as ck  # noqa: E402
from agentgym.train.tiny import build_tiny  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_tiny(tmp_path_factory.mktemp("tiny") / "model")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _save(run_dir: Path, iteration: int, tiny, keep: int = 3) -> Path:
    model, tokenizer = tiny
    return ck.save_checkpoint(run_dir, iteration, model, tokenizer, {"optimizer": {}, "next_seed": iteration},
                              keep=keep)


def test_a_checkpoint_is_renamed_in_whole_with_a_manifest(tmp_path, tiny):
    ckpt = _save(tmp_path, 1, tiny)
    assert (tmp_path / ck.LATEST).read_text() == "ckpt-1" and ck.checkpoint_problem(ckpt) is None
    assert {"trainer.pt", "model/model.safetensors"} <= set(
        __import__("json").loads((ckpt / ck.MANIFEST).read_text())["files"])
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp name left behind
    again = _save(tmp_path, 1, tiny)  # the same iteration again (a resumed run): replaced whole
    assert again == ckpt and ck.checkpoint_problem(ckpt) is None
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_a_torn_checkpoint_is_never_loaded(tmp_path, tiny):
    _save(tmp_path, 1, tiny)
    torn = _save(tmp_path, 2, tiny)
    data = (torn / "model" / "model.safetensors").read_bytes()
    (torn / "model" / "model.safetensors").write_bytes(data[: len(data) // 2])   # a write cut short
    (tmp_path / ".tmp-ckpt-3").mkdir()  # a kill during the next write: never named ckpt-3, never considered
    said: list[str] = []
    assert ck.find_checkpoint("auto", tmp_path, said.append) == tmp_path / "ckpt-1"
    assert "ckpt-2 is damaged" in said[0] and "model/model.safetensors holds" in said[0]
    assert "resuming from" in said[1] and "'ckpt-2'" in said[1]
    _save(tmp_path, 2, tiny)  # the redone iteration replaces the torn copy whole; the kill's leftovers go
    assert ck.find_checkpoint("auto", tmp_path) == tmp_path / "ckpt-2"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_a_corrupted_file_is_refused_with_its_reason_and_the_previous_checkpoint_used(tmp_path, tiny):
    _save(tmp_path, 1, tiny)
    bad = _save(tmp_path, 2, tiny)
    state = bytearray((bad / "trainer.pt").read_bytes())
    state[len(state) // 2] ^= 0xFF  # one flipped byte, same size
    (bad / "trainer.pt").write_bytes(bytes(state))
    said: list[str] = []
    found = ck.find_checkpoint("auto", tmp_path, said.append)
    assert found == tmp_path / "ckpt-1" and ck.load_state(found)["next_seed"] == 1
    assert "trainer.pt differs from what was written (sha256 mismatch)" in said[0]
    with pytest.raises(ck.CheckpointError, match=r"ckpt-2 is damaged \(trainer.pt differs") as exc:
        ck.find_checkpoint(str(bad), tmp_path)  # named explicitly: refused, not swapped for another
    assert "\n" not in str(exc.value)
    (tmp_path / "ckpt-1" / "trainer.pt").unlink()
    with pytest.raises(ck.CheckpointError, match="no whole checkpoint"):
        ck.find_checkpoint("auto", tmp_path, said.append)


def test_a_torn_latest_pointer_does_not_hide_the_checkpoints(tmp_path, tiny):
    _save(tmp_path, 1, tiny)
    (tmp_path / ck.LATEST).write_bytes(b"ckpt-\x00\x00")
    assert ck.find_checkpoint("auto", tmp_path, lambda _: None) == tmp_path / "ckpt-1"


def test_checkpoints_from_before_manifests_still_load(tmp_path, tiny):
    ckpt = _save(tmp_path, 1, tiny)
    (ckpt / ck.MANIFEST).unlink()
    assert ck.checkpoint_problem(ckpt) is None and ck.find_checkpoint("auto", tmp_path) == ckpt


@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(kib)`: a tmpfs of that size, mounted for the test."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mounts: list[Path] = []

    def mount(kib: int) -> Path:
        where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounts.append(where)
        return where

    try:
        yield mount
    finally:
        for where in mounts:
            subprocess.run(["umount", "-l", str(where)], check=False)


def _kib(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) // 1024


def test_a_full_disk_fails_the_write_in_one_line_and_keeps_the_last_good_checkpoint(small_disk, tiny, tmp_path):
    size = _kib(_save(tmp_path / "measure", 1, tiny))
    disk = small_disk(size * 3 // 2)  # room for one checkpoint, not for a second beside it
    first = _save(disk, 1, tiny)
    with pytest.raises(ck.CheckpointError) as exc:
        _save(disk, 2, tiny)
    message = str(exc.value)
    assert "\n" not in message and "checkpoint ckpt-2 could not be written: the disk is full" in message
    assert "the last good checkpoint, ckpt-1, is intact" in message and "checkpoint.resume=auto" in message
    assert sorted(os.listdir(disk)) == ["ckpt-1", "latest"]  # the partial copy is gone, space given back
    assert (disk / ck.LATEST).read_text() == "ckpt-1" and ck.checkpoint_problem(first) is None


@pytest.mark.slow
def test_a_training_run_on_a_full_disk_stops_with_one_line_and_resumes_from_its_last_checkpoint(small_disk,
                                                                                                tmp_path):
    """`agentgym train` on a disk sized from a one-iteration run: iteration 1's checkpoint fits, iteration 2's
    does not. The run exits 2 with one line; moved to a roomy disk, checkpoint.resume=auto carries it on from
    ckpt-1 to the end."""
    args = [sys.executable, "-m", "agentgym.train", "toy_learning", "rollout.groups=2", "rollout.group_size=2",
            "eval.every=0", "checkpoint.every=1", "checkpoint.keep=2"]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    measure = tmp_path / "measure"
    subprocess.run([*args, "train.iterations=1", f"train.run_dir={measure}"], capture_output=True, timeout=300,
                   env=env, check=True)
    run_dir = small_disk(_kib(measure) + _kib(measure / "ckpt-1") // 2) / "run"
    done = subprocess.run([*args, "train.iterations=2", f"train.run_dir={run_dir}"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("agentgym train: error: checkpoint ckpt-2 could not be written: the disk is full"), \
        done.stderr[-2000:]
    assert "ckpt-1, is intact" in last and ck.checkpoint_problem(run_dir / "ckpt-1") is None
    roomy = tmp_path / "run"
    shutil.copytree(run_dir, roomy)
    resumed = subprocess.run([*args, "train.iterations=2", f"train.run_dir={roomy}", "checkpoint.resume=auto"],
                             capture_output=True, text=True, timeout=300, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (roomy / ck.LATEST).read_text() == "ckpt-2" and ck.checkpoint_problem(roomy / "ckpt-2") is None


@pytest.mark.slow
def test_a_resume_after_a_kill_mid_log_write_drops_the_cut_line(tmp_path):
    """Issue 51 fault campaign: a SIGKILL during a JSONL append leaves a cut last line; the resume's
    _truncate_metrics (train/trainer.py) drops it and rewrites the file atomically."""
    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    def config(*extra: str):
        return load_config("toy_learning", [f"train.run_dir={tmp_path / 'run'}", "rollout.groups=2",
                                            "rollout.group_size=2", "eval.every=0", *extra])

    run = train(config("train.iterations=1"))
    with open(run / "rollouts.jsonl", "a") as fh:  # what a kill inside write_rollouts leaves
        fh.write('{"iteration": 1, "env": "agentgym/Toy-KeyDoor-OneWord-v0", "seed": 2, "gro')
    train(config("train.iterations=2", "checkpoint.resume=auto"))
    lines = (run / "rollouts.jsonl").read_text().splitlines()
    assert all(isinstance(__import__("json").loads(line), dict) for line in lines)
    assert [m["iteration"] for m in read_metrics(run)] == [0, 1]


@pytest.mark.slow
def test_a_resume_from_a_checkpoint_latest_does_not_name_points_latest_at_it(tmp_path):
    """A kill between publishing ckpt-N and moving `latest` (or a damaged newest checkpoint) leaves `latest`
    naming another checkpoint than the one a resume takes: the resume moves it, so what reads `latest` after
    (evaluation, `checkpoint:DIR`, a run with nothing left to train) gets the resumed weights. Found by the fault
    campaign: a resume with no iteration left to run kept `latest` on the previous checkpoint."""
    from agentgym.train.config import load_config
    from agentgym.train.trainer import train

    def config(*extra: str):
        return load_config("toy_learning", [f"train.run_dir={tmp_path / 'run'}", "rollout.groups=2",
                                            "rollout.group_size=2", "eval.every=0", "checkpoint.every=1", *extra])

    run = train(config("train.iterations=2"))
    ck.write_atomically(run / ck.LATEST, "ckpt-1")  # the kill landed after ckpt-2's rename, before `latest` moved
    train(config("train.iterations=2", "checkpoint.resume=auto"))
    assert (run / ck.LATEST).read_text() == "ckpt-2"
    state = bytearray((run / "ckpt-2" / "trainer.pt").read_bytes())
    state[len(state) // 2] ^= 0xFF
    (run / "ckpt-2" / "trainer.pt").write_bytes(bytes(state))
    train(config("train.iterations=1", "checkpoint.resume=auto"))  # falls back to ckpt-1: nothing left to run
    assert (run / ck.LATEST).read_text() == "ckpt-1"
