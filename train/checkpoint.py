"""Checkpoints that resume to the same trajectory.

    run_dir/ckpt-N/model/        HF `save_pretrained` (safetensors) + tokenizer; with LoRA the merged
                                 model, so `checkpoint:DIR` policies and eval load it like any model
    run_dir/ckpt-N/adapter/      LoRA adapter weights (resume trains the adapter, not the merge)
    run_dir/ckpt-N/dcp/          under torchrun: model + optimizer state from every rank (torch.distributed.checkpoint)
    run_dir/ckpt-N/trainer.pt    optimizer, critic, RNG states (python, numpy, torch), iteration, next seed
    run_dir/ckpt-N/manifest.json every other file's size and sha256 (written last inside the checkpoint)
    run_dir/latest               the name of the newest complete checkpoint (written last)

A crash loses at most the work since the last checkpoint. A checkpoint is written under a temporary name,
every file and folder fsynced, then renamed into place, and `latest` moves by the same write-fsync-rename;
so a kill at any moment leaves the previous checkpoint whole and `latest` naming a whole one. A resume
checks the manifest (sizes and hashes) and refuses a damaged checkpoint with the reason, falling back to
the newest whole one (`find_checkpoint`). A write that fails (a full disk) removes its partial copy and
raises `CheckpointError`: one line naming the cause and the last good checkpoint, which is untouched.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from agentgym.errors import AgentGymError, ConfigError

LATEST = "latest"
MANIFEST = "manifest.json"


class CheckpointError(AgentGymError):
    """A checkpoint could not be written, or none that was asked for is whole; the message says what to do."""


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators (the RNG state a checkpoint saves and restores)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config")


def save_model(model: Any, tokenizer: Any, target: Path) -> None:
    """HF format; a peft model is merged into a copy of its base first (the trained one is untouched)."""
    if _is_peft(model):
        import copy

        model.save_pretrained(target.parent / "adapter")
        merged = copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(target, safe_serialization=True)
    else:
        model.save_pretrained(target, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(target)


def save_checkpoint(run_dir: Path, iteration: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    keep: int = 2, extra_dirs: dict[str, Path] | None = None) -> Path:
    """Write ckpt-<iteration>/ (the model, trainer.pt) as `write_checkpoint` does. `extra_dirs` (name -> a finished
    directory, e.g. sharded `dcp/` state) move in before `latest` moves."""
    def fill(tmp: Path) -> None:
        save_model(model, tokenizer, tmp / "model")
        torch.save({**state, "rng": rng_state(), "iteration": iteration}, tmp / "trainer.pt")
        for name, path in (extra_dirs or {}).items():
            shutil.move(str(path), str(tmp / name))

    return write_checkpoint(run_dir, iteration, fill, keep)


def write_checkpoint(run_dir: Path, iteration: int, fill: Callable[[Path], None], keep: int = 2) -> Path:
    """Write ckpt-<iteration>/ atomically (`fill` writes its files into a temporary folder, then its manifest,
    fsync, rename), then point `latest` at it, then drop old ones beyond `keep` (0: none dropped). A failed write
    (a full disk) leaves every earlier checkpoint and `latest` as they were: CheckpointError."""
    ckpt = run_dir / f"ckpt-{iteration}"
    tmp = run_dir / f".tmp-ckpt-{iteration}"
    for stale in [*run_dir.glob(".tmp-ckpt-*"), *run_dir.glob(".old-ckpt-*")]:  # left by a kill: never loaded
        shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        fill(tmp)
        _write_manifest(tmp, iteration)
        _fsync_tree(tmp)
        old = run_dir / f".old-ckpt-{iteration}"  # a checkpoint of this iteration already there: replaced whole
        if ckpt.exists():
            shutil.rmtree(old, ignore_errors=True)
            ckpt.rename(old)
        tmp.rename(ckpt)
        _fsync_dir(run_dir)
        write_atomically(run_dir / LATEST, ckpt.name)
        shutil.rmtree(old, ignore_errors=True)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # give the space back; earlier checkpoints were not touched
        raise CheckpointError(write_failure(run_dir, f"checkpoint {ckpt.name}", exc)) from exc
    if keep > 0:
        for stale in sorted(run_dir.glob("ckpt-*"), key=_iteration_of)[:-keep]:
            shutil.rmtree(stale, ignore_errors=True)
    return ckpt


def write_atomically(path: Path, text: str) -> None:
    """`path` holds `text` or what it held before, never part of either: temp file, fsync, rename, fsync dir."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Every file and folder under `root` on disk before the rename publishes it (a crash then finds it whole)."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(folder))


def _iteration_of(path: Path) -> int:
    tail = path.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _write_manifest(ckpt: Path, iteration: int) -> None:
    files = {str(p.relative_to(ckpt)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(ckpt.rglob("*")) if p.is_file()}
    (ckpt / MANIFEST).write_text(json.dumps({"iteration": iteration, "files": files}, indent=1))


def write_failure(run_dir: Path, what: str, exc: BaseException) -> str:
    """One line: why `what` (a checkpoint, a log file of the run) was not written (a full disk said so, with the
    space left), and the last good checkpoint to resume from."""
    full = getattr(exc, "errno", None) == errno.ENOSPC or "No space left" in str(exc) or \
        "file write failed" in str(exc)
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        free = -1
    why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    cause = f"the disk is full ({free // 1024} KiB free in {run_dir})" if full or 0 <= free < 1 << 20 else why
    good = _newest_whole(run_dir, lambda _: None)
    kept = f"the last good checkpoint, {good.name}, is intact" if good is not None else "no earlier checkpoint exists"
    return (f"{what} could not be written: {cause} [{type(exc).__name__}: {why}]; {kept}. Free space "
            "(or set train.run_dir elsewhere) and run again with checkpoint.resume=auto")


def checkpoint_problem(ckpt: Path) -> str | None:
    """Why `ckpt` cannot be resumed from (a missing, cut or changed file), or None if it is whole. A checkpoint
    from before manifests were written is checked for its trainer.pt only."""
    manifest = ckpt / MANIFEST
    if not manifest.exists():
        return None if (ckpt / "trainer.pt").is_file() else "it has no trainer.pt"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its {MANIFEST} is unreadable ({type(exc).__name__})"
    for rel, want in files.items():
        path = ckpt / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != want["bytes"]:
            return f"{rel} holds {path.stat().st_size} bytes, not the {want['bytes']} written"
        if _sha256(path) != want["sha256"]:
            return f"{rel} differs from what was written (sha256 mismatch)"
    return None


def _warn(message: str) -> None:
    print(f"agentgym train: {message}", file=sys.stderr, flush=True)


def _newest_whole(run_dir: Path, say: Callable[[str], None]) -> Path | None:
    """The newest checkpoint of `run_dir` that is whole; each damaged newer one is reported through `say`."""
    for ckpt in sorted((p for p in run_dir.glob("ckpt-*") if p.is_dir()), key=_iteration_of, reverse=True):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            return ckpt
        say(f"checkpoint {ckpt} is damaged and is skipped: {problem}")
    return None


def find_checkpoint(spec: str, run_dir: Path, say: Callable[[str], None] = _warn) -> Path | None:
    """"auto" -> run_dir's newest whole checkpoint (or None if it has none); a run dir -> its newest whole one;
    a ckpt-N dir -> that checkpoint. A damaged checkpoint is never loaded: in a run dir the one before it is
    taken (reported through `say`), and when none is whole, or the ckpt-N named is damaged, CheckpointError."""
    if not spec:
        return None
    base = run_dir if spec == "auto" else Path(spec)
    if (spec != "auto" and (base / "trainer.pt").exists()) or (base / MANIFEST).exists():
        problem = checkpoint_problem(base)
        if problem:
            raise CheckpointError(f"checkpoint.resume={spec!r}: {base} is damaged ({problem}); point it at an "
                                  "earlier ckpt-N, or at the run dir to take its newest whole checkpoint")
        return base
    ckpts = [p for p in base.glob("ckpt-*") if p.is_dir()]
    if ckpts:
        found = _newest_whole(base, say)
        if found is None:
            raise CheckpointError(f"checkpoint.resume={spec!r}: no whole checkpoint in {base} (every ckpt-N is "
                                  "damaged, see above); start a new run (another train.run_dir)")
        pointed = (base / LATEST).read_text(errors="replace").strip() if (base / LATEST).exists() else None
        if pointed != found.name:
            say(f"resuming from {found} ({LATEST} names {pointed!r})")
        return found
    if spec == "auto":
        return None
    raise ConfigError(f"checkpoint.resume={spec!r}: no trainer.pt there; point it at a run dir or a ckpt-N dir")


def refuse_an_earlier_run(run_dir: Path, resume: str) -> None:
    """A run from iteration 0 appends to run_dir's logs, so one started where another logged would mix the
    two runs' curves and evals: refused, unless checkpoint.resume asks to continue what is there."""
    metrics = run_dir / "metrics.jsonl"
    if resume or not metrics.exists() or not metrics.read_text().strip():
        return
    raise ConfigError(f"train.run_dir={run_dir} already holds a run (metrics.jsonl): continue it with "
                      "checkpoint.resume=auto, or pass another train.run_dir (or delete that one)")


def load_state(ckpt: Path) -> dict[str, Any]:
    return torch.load(ckpt / "trainer.pt", map_location="cpu", weights_only=False)


def load_weights_into(model: Any, ckpt: Path) -> None:
    """Restore trained weights in place: the adapter for peft models, all weights otherwise."""
    from safetensors.torch import load_file

    if _is_peft(model):
        from peft import set_peft_model_state_dict

        adapter = ckpt / "adapter"
        files = list(adapter.glob("*.safetensors"))
        set_peft_model_state_dict(model, load_file(str(files[0])))
        return
    state: dict[str, torch.Tensor] = {}
    for f in sorted((ckpt / "model").glob("*.safetensors")):
        state.update(load_file(str(f)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {k for k in missing if "lm_head" in k}  # tied embeddings are saved once
    if set(missing) - tied or unexpected:
        raise ConfigError(f"checkpoint {ckpt} does not fit this model (missing {sorted(missing)[:3]}, "
                          f"unexpected {sorted(unexpected)[:3]}); resume with the same model config")


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str))
