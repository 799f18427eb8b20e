"""Data-parallel training with torch.distributed: `torchrun --nproc_per_node N -m agentgym.train CONFIG`.

Rank 0 rolls out and broadcasts the batch; every rank scores it; each mini-batch is split across the
ranks, whose gradients torch's DistributedDataParallel all-reduces (gloo on CPU, nccl on CUDA). The
loss of a micro-batch is already normalised by the whole mini-batch's denominator, so scaling it by
the world size turns DDP's gradient mean into the 1-process gradient sum: after one step the loss and
the weights equal a 1-process run on the same batch (within float tolerance). Checkpoints add every
rank's model + optimizer state written with torch.distributed.checkpoint (ckpt-N/dcp/).
"""
from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from agentgym.errors import ConfigError

MODES = ("none", "ddp")


@dataclass(frozen=True)
class DistContext:
    rank: int
    world: int
    ddp: Any          # the DistributedDataParallel wrapper of the trained model

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_world() -> int:
    """The world size torchrun set (1 when not launched by it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def setup(mode: str, model: Any, device: Any, has_critic: bool) -> DistContext | None:
    """Join the process group torchrun prepared and wrap `model` in DDP; None for a 1-process run."""
    world = launched_world()
    if mode == "none" and world == 1:
        return None
    if mode not in MODES:
        raise ConfigError(f"train.distributed={mode!r}: use one of {', '.join(MODES)} (fsdp is not available yet)")
    if world == 1:
        raise ConfigError(f"train.distributed={mode} needs several processes: launch with "
                          "`torchrun --nproc_per_node N -m agentgym.train CONFIG ...`")
    if has_critic:
        raise ConfigError("data-parallel training does not sync a critic yet: use model.critic=none "
                          "(gigpo/grpo/rloo/reinforce_pp) with torchrun")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    cuda = getattr(device, "type", "cpu") == "cuda"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(device)
    ddp = DistributedDataParallel(model, device_ids=[device] if cuda else None)
    return DistContext(dist.get_rank(), dist.get_world_size(), ddp)


def broadcast(ctx: DistContext | None, value: Any) -> Any:
    """Rank 0's `value` on every rank (pickled; rollout batches are small next to the model)."""
    if ctx is None:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(ctx: DistContext | None) -> None:
    if ctx is not None:
        import torch.distributed as dist

        dist.barrier()


def local_part(ctx: DistContext | None, index: Sequence[int]) -> list[int]:
    """This rank's contiguous share of a mini-batch's sample indices."""
    if ctx is None:
        return list(index)
    if len(index) < ctx.world:
        raise ConfigError(f"a mini-batch of {len(index)} samples cannot be split over {ctx.world} ranks: "
                          "lower train.mini_batches or raise rollout.groups")
    return np.array_split(np.asarray(index), ctx.world)[ctx.rank].tolist()


def grad_sync(ctx: DistContext | None, last: bool):
    """DDP all-reduces on a mini-batch's last backward only; earlier micro-batches accumulate locally."""
    return ctx.ddp.no_sync() if ctx is not None and not last else nullcontext()


def loss_scale(ctx: DistContext | None) -> float:
    """DDP averages gradients over ranks; the 1-process gradient is their sum."""
    return float(ctx.world) if ctx is not None else 1.0


def all_reduce_sum(ctx: DistContext | None, values: Sequence[float]) -> list[float]:
    if ctx is None:
        return list(values)
    import torch
    import torch.distributed as dist

    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def save_sharded(ctx: DistContext, optimizer: Any, target: Any) -> None:
    """Every rank writes its part of the model and optimizer state with torch.distributed.checkpoint."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(ctx.ddp, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(target))


def load_sharded(ctx: DistContext, optimizer: Any, source: Any) -> None:
    """Restore model and optimizer state in place from a `save_sharded` directory (every rank)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(ctx.ddp, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(source))
    set_state_dict(ctx.ddp, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def shutdown(ctx: DistContext | None) -> None:
    if ctx is not None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
