"""Checkpoints that resume to the same trajectory.

    run_dir/ckpt-N/model/        HF `save_pretrained` (safetensors) + tokenizer; with LoRA the merged
                                 model, so `checkpoint:DIR` policies and eval load it like any model
    run_dir/ckpt-N/adapter/      LoRA adapter weights (resume trains the adapter, not the merge)
    run_dir/ckpt-N/dcp/          under torchrun: model + optimizer state from every rank (torch.distributed.checkpoint)
    run_dir/ckpt-N/trainer.pt    optimizer, critic, RNG states (python, numpy, torch), iteration, next seed
    run_dir/latest               the name of the newest complete checkpoint (written last)
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym.errors import ConfigError

LATEST = "latest"


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
    """Write ckpt-<iteration>/, then point `latest` at it, then drop old ones beyond `keep`.
    `extra_dirs` (name -> a finished directory, e.g. sharded `dcp/` state) move in before `latest` moves."""
    ckpt = run_dir / f"ckpt-{iteration}"
    tmp = run_dir / f".tmp-ckpt-{iteration}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, tokenizer, tmp / "model")
    torch.save({**state, "rng": rng_state(), "iteration": iteration}, tmp / "trainer.pt")
    for name, path in (extra_dirs or {}).items():
        shutil.move(str(path), str(tmp / name))
    shutil.rmtree(ckpt, ignore_errors=True)
    tmp.rename(ckpt)
    (run_dir / LATEST).write_text(ckpt.name)
    if keep > 0:
        for old in sorted(run_dir.glob("ckpt-*"), key=lambda p: int(p.name.split("-")[1]))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return ckpt


def find_checkpoint(spec: str, run_dir: Path) -> Path | None:
    """"auto" -> run_dir's latest checkpoint (or None); a path -> that checkpoint (or its run dir's latest)."""
    if not spec:
        return None
    base = run_dir if spec == "auto" else Path(spec)
    if (base / LATEST).exists():
        base = base / (base / LATEST).read_text().strip()
    if (base / "trainer.pt").exists():
        return base
    if spec == "auto":
        return None
    raise ConfigError(f"checkpoint.resume={spec!r}: no trainer.pt there; point it at a run dir or a ckpt-N dir")


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
