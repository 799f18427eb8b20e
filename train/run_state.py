"""What a checkpoint keeps of a training run, and how a run comes back from one (the trainer's save and resume).

    state = {optimizer, scheduler, critic, **learner.state_dict(), **extra}   # extra: the collector's, ...
    save_run(parts, run_dir, iteration, keep, extra) -> RUN_DIR/ckpt-N (weights + trainer.pt [+ dcp/])
    restore_run(parts, ckpt) -> that state, with weights, critic, learner, optimizer, scheduler and rng restored

The keys written here are the keys read back here. Under train.distributed every rank writes its shard of model
and optimizer (dcp/) and rank 0 the HF weights; fsdp keeps its optimizer and critic state in dcp/ only, so
trainer.pt holds None for them. The files themselves are checkpoint.py's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError
from agentgym.train import checkpoint as ck
from agentgym.train import distributed as D
from agentgym.train import merge


@dataclass
class RunParts:
    """The parts a checkpoint holds, each restored in place on resume (`dist`: a train.distributed context)."""

    model: Any
    tokenizer: Any
    optimizer: Any
    scheduler: Any
    critic: Any
    learner: Any
    dist: Any = None


def save_run(parts: RunParts, run_dir: Path, iteration: int, keep: int, extra: dict[str, Any]) -> Path:
    """Checkpoint `iteration`: the weights and trainer.pt (`extra` merged in: the collector's state, the
    unmerged weights of a train.change_kept run); every rank joins under train.distributed."""
    sharded = D.is_fsdp(parts.dist)  # its optimizer and critic state live in dcp/ only
    state = {"optimizer": None if sharded else parts.optimizer.state_dict(),
             "scheduler": parts.scheduler.state_dict() if parts.scheduler is not None else None,
             "critic": parts.critic.state_dict() if parts.critic is not None and not sharded else None,
             **parts.learner.state_dict(), **extra}
    if parts.dist is None:
        return ck.save_checkpoint(run_dir, iteration, parts.model, parts.tokenizer, state, keep)
    # every rank writes its shard of model + optimizer; rank 0 adds the HF weights and moves `latest`
    shards = run_dir / f".tmp-dcp-{iteration}"
    D.save_sharded(parts.dist, parts.optimizer, shards)
    D.barrier(parts.dist)
    ckpt = run_dir / f"ckpt-{iteration}"
    if parts.dist.is_main:  # under fsdp the unsharded copy holds the weights (synced after every update)
        hf = parts.dist.full_model if sharded else parts.model
        ckpt = ck.save_checkpoint(run_dir, iteration, hf, parts.tokenizer, state, keep, extra_dirs={"dcp": shards})
    D.barrier(parts.dist)
    return ckpt


def restore_run(parts: RunParts, ckpt: Path) -> dict[str, Any]:
    """Restore `ckpt` into `parts` in place (every rank alike; DDP holds the same module) and the rng; returns
    its state (iteration, the collector's part, ...). A sharded checkpoint resumes only under fsdp, an unsharded
    one only without it: each refused with the way to resume it."""
    state = ck.load_state(ckpt)
    if "soup_of" in state:  # train/soup.py's average: weights only
        raise ConfigError(f"{ckpt} averages a soup's runs (train.soup_runs) and keeps no optimizer state to resume: "
                          f"train on from its weights in a new run dir with model.policy=checkpoint:{ckpt}")
    sharded = parts.dist is not None and (ckpt / "dcp").is_dir()
    if state["optimizer"] is None and not sharded:
        raise ConfigError(f"{ckpt} holds sharded state (train.distributed=fsdp): resume it under torchrun "
                          "with train.distributed=fsdp")
    if D.is_fsdp(parts.dist) and not sharded:
        raise ConfigError(f"{ckpt} has no sharded state (dcp/): resume it in one process or with "
                          "train.distributed=ddp")
    if not D.is_fsdp(parts.dist):  # sharded modules take their weights from dcp/ below
        ck.load_weights_into(parts.model, ckpt)
        if state.get("trained_weights") is not None:  # a merged final checkpoint: train on from the unmerged
            merge.load_weights(parts.model, state["trained_weights"])
        if parts.critic is not None and state.get("critic") is not None:
            parts.critic.load_state_dict(state["critic"])
        parts.learner.load_state_dict(state)
    if sharded:
        D.load_sharded(parts.dist, parts.optimizer, ckpt / "dcp")
    else:
        parts.optimizer.load_state_dict(state["optimizer"])
    if parts.scheduler is not None and state.get("scheduler") is not None:
        parts.scheduler.load_state_dict(state["scheduler"])
    ck.set_rng_state(state["rng"])
    return state
