"""Data-parallel training with torch.distributed: `torchrun --nproc_per_node N -m agentgym.train CONFIG`.

Rank 0 rolls out and broadcasts the batch; every rank scores it; each mini-batch is split across the
ranks. `train.distributed=ddp` wraps the model (and the critic) in DistributedDataParallel, which
all-reduces gradients; `fsdp` shards them with FSDP2 (`fully_shard` on each decoder layer, then the
root), which all-gathers parameters per layer and reduce-scatters gradients. Gloo on CPU, nccl on CUDA.

Both reduce by the *mean* over ranks. The loss of a micro-batch is already normalised by the whole
mini-batch's denominator, so scaling it by the world size turns that mean into the 1-process gradient
sum: after one step the loss and the weights equal a 1-process run on the same batch (within float
tolerance). Checkpoints add every rank's model, critic and optimizer state written with
torch.distributed.checkpoint (ckpt-N/dcp/), which is what a torchrun resume loads.

FSDP and rollouts: rank 0 generates alone while the others wait, so it must not generate with the
sharded module, whose every forward is a collective the idle ranks would have to join token by token.
`unshard()` around the rollout (with resharding after forward switched off) would gather the full
weights onto every rank, not just rank 0, and keep FSDP's hooks in every decoding step. Rank 0 instead
keeps a plain unsharded copy, refreshed after each update by one gather of the trainable weights
(`get_model_state_dict(full_state_dict, cpu_offload)`: LoRA gathers just the adapters), exactly as a
vLLM engine gets weights pushed. It costs one full copy on rank 0 (what unsharded parameters would hold
during generation anyway) and one gather per iteration (benchmarks/scale.py prints its time); the same
copy writes the HF weights of checkpoints.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import warnings
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from agentgym.errors import ConfigError

MODES = ("none", "ddp", "fsdp")


@dataclass(frozen=True)
class DistContext:
    rank: int
    world: int
    mode: str                # "ddp" or "fsdp"
    model: Any               # what the update runs forward through: the DDP wrapper, or the sharded model itself
    critic: Any = None       # the critic likewise (None without one)
    full_model: Any = None   # fsdp, rank 0: the unsharded copy it rolls out with and saves HF weights from

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_world() -> int:
    """The world size torchrun set (1 when not launched by it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_by_torchrun() -> bool:
    """True under torchrun, also with one process (`--nproc_per_node 1`: ddp/fsdp on a single GPU)."""
    return "WORLD_SIZE" in os.environ


def launched_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def is_fsdp(ctx: DistContext | None) -> bool:
    return ctx is not None and ctx.mode == "fsdp"


def pin_cuda_device(device: str) -> None:
    """Under torchrun each rank owns GPU LOCAL_RANK: make it the current device before anything lands on
    "cuda" (without it every rank would use GPU 0)."""
    if launched_world() > 1 and device.startswith("cuda:"):
        raise ConfigError(f"model.device={device} would put every torchrun rank on one GPU: use model.device=cuda "
                          "(each rank takes GPU LOCAL_RANK)")
    if launched_world() > 1 and device == "cuda":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


def setup(mode: str, c: Any, config: Any, *, make_policy: Callable[..., Any], make_optimizer: Callable[..., Any]
          ) -> tuple[DistContext | None, Any]:
    """Join the process group torchrun prepared and wrap (ddp) or shard (fsdp) the model and critic of
    the trainer's Components `c`; returns (None, c) for a 1-process run, else (context, new components).
    fsdp rebuilds rank 0's rollout policy and the optimizer with the trainer's own `make_policy` /
    `make_optimizer` (train/setup.py), handed in so this module sits below the setup it serves."""
    world = launched_world()
    if mode == "none" and world == 1:
        return None, c
    if mode not in MODES:
        raise ConfigError(f"train.distributed={mode!r}: use one of {', '.join(MODES)}")
    if not launched_by_torchrun():
        raise ConfigError(f"train.distributed={mode} needs torchrun's process group: launch with "
                          "`torchrun --nproc_per_node N -m agentgym.train CONFIG ...`")
    if config.rollout.action_mode == "admissible":
        raise ConfigError("rollout.action_mode=admissible trains on one process only: drop torchrun or use "
                          "rollout.action_mode=generate")
    import torch
    import torch.distributed as dist

    cuda = getattr(c.device, "type", "cpu") == "cuda"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "fsdp":
        return _setup_fsdp(c, config, rank, world, cuda, make_policy, make_optimizer)
    from torch.nn.parallel import DistributedDataParallel

    ids = [torch.cuda.current_device()] if cuda else None
    model = DistributedDataParallel(c.model, device_ids=ids)
    critic = None
    if c.critic is not None:  # a separate backbone's own LM head (untied) gets no gradient from the value loss
        critic = DistributedDataParallel(c.critic, device_ids=ids, find_unused_parameters=not c.critic.shared)
    return DistContext(rank, world, "ddp", model, critic), c


def _setup_fsdp(c: Any, config: Any, rank: int, world: int, cuda: bool, make_policy: Callable[..., Any],
                make_optimizer: Callable[..., Any]) -> tuple[DistContext, Any]:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401  (public since torch 2.6)
    except ImportError as exc:
        raise ConfigError("train.distributed=fsdp needs FSDP2 (torch>=2.6): upgrade torch or use "
                          "train.distributed=ddp") from exc
    from torch.distributed.device_mesh import init_device_mesh

    full_model, policy = None, c.policy
    if rank == 0:  # copied before sharding; see the module docstring for why rank 0 rolls out with a copy
        shares = getattr(c.policy, "model", None) is c.model
        full_model = copy.deepcopy(c.model)
        if shares:
            policy = make_policy(config, full_model, c.tokenizer)
        else:  # a separate engine (vLLM) holds its own weights: the copy only stages pushes and checkpoints
            full_model = full_model.to("cpu")
    # HF returns its logits as a slice (a view); nothing here edits them in place, which is what FSDP warns of
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    mesh = init_device_mesh("cuda" if cuda else "cpu", (world,))
    for module in (c.model, c.critic, _reference_copy(c)):  # a KL reference copy is sharded too: no rank holds it whole
        if module is not None:
            broadcast_weights(module)
            shard(module, mesh)
    # fully_shard replaced the parameters with DTensors: the optimizer must hold the new ones
    optimizer, scheduler = make_optimizer(config, c.model, c.critic)
    c = dataclasses.replace(c, optimizer=optimizer, scheduler=scheduler, policy=policy)
    return DistContext(rank, world, "fsdp", c.model, c.critic, full_model), c


def _reference_copy(c: Any) -> Any:
    """The frozen copy the KL penalty reads, or None (no KL, or LoRA's: the model with adapters off)."""
    if c.ref is None:
        return None
    with c.ref() as ref_model:
        return None if ref_model is c.model else ref_model


def broadcast_weights(module: Any) -> None:
    """Rank 0's weights on every rank, as DDP does when it wraps a model: each rank keeps only its shard
    of its own copy, so copies that differ (an unseeded random init) would splice silently."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for tensor in module.state_dict().values():
            dist.broadcast(tensor, src=0)


def shard(module: Any, mesh: Any) -> Any:
    """FSDP2: each transformer block (the classes HF lists in `_no_split_modules`) its own unit, then the
    root, which keeps embeddings, final norm, a tied LM head and a value head."""
    from torch.distributed.fsdp import fully_shard

    blocks: set[str] = set()
    for m in module.modules():
        blocks.update(getattr(m, "_no_split_modules", None) or ())
    for m in list(module.modules()):
        if m is not module and type(m).__name__ in blocks:
            fully_shard(m, mesh=mesh)
    fully_shard(module, mesh=mesh)
    return module


def is_sharded(model: Any) -> bool:
    """True for an FSDP2 module (its root forward must run: that is what gathers the root's parameters)."""
    import sys

    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def trained_params(module: Any) -> list[Any]:
    """The parameters the optimizer steps, where their gradients land. FSDP2 leaves a root's parameters
    unsharded (plain tensors) after a forward without backward (scoring), so reshard it first."""
    if is_sharded(module):
        module.reshard()
    return [p for p in module.parameters() if p.requires_grad]


def sync_full_copy(ctx: DistContext, model: Any) -> Any:
    """Every rank joins one gather of `model`'s trainable weights; rank 0 writes them into its unsharded
    copy and returns it (None elsewhere). Frozen weights (a LoRA base) never change, so they stay put."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    state = get_model_state_dict(model, options=options)
    if ctx.full_model is None:
        return None
    _, unexpected = ctx.full_model.load_state_dict(state, strict=False)
    trainable = {n for n, p in ctx.full_model.named_parameters() if p.requires_grad}
    if unexpected or trainable - state.keys():
        raise RuntimeError(f"the gathered state does not fit rank 0's copy: unexpected {unexpected[:3]}, "
                           f"missing {sorted(trainable - state.keys())[:3]}")
    return ctx.full_model


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


def local_micro_batches(ctx: DistContext | None, samples: Sequence[Any], index: Sequence[int],
                        size: int) -> list[list[int]]:
    """This rank's micro-batches of a mini-batch. Under fsdp every forward and backward is a collective,
    so a rank with fewer micro-batches than another gets empty ones ([]) to run as zero-loss fillers."""
    from agentgym.train.samples import micro_batches

    mine = micro_batches(samples, local_part(ctx, index), size)
    if not is_fsdp(ctx):
        return mine
    parts = np.array_split(np.asarray(index), ctx.world)
    most = max(len(micro_batches(samples, part.tolist(), size)) for part in parts)
    return mine + [[] for _ in range(most - len(mine))]


def grad_sync(ctx: DistContext | None, last: bool):
    """DDP all-reduces on a mini-batch's last backward only; earlier micro-batches accumulate locally.
    FSDP reduce-scatters after every backward: skipping it would hold unsharded gradients, the memory
    sharding exists to save."""
    if ctx is None or last or ctx.mode != "ddp":
        return nullcontext()
    stack = ExitStack()
    for wrapper in (ctx.model, ctx.critic):
        if wrapper is not None:
            stack.enter_context(wrapper.no_sync())
    return stack


def loss_scale(ctx: DistContext | None) -> float:
    """DDP and FSDP average gradients over ranks; the 1-process gradient is their sum."""
    return float(ctx.world) if ctx is not None else 1.0


def clip_grad_norm(params: Sequence[Any], max_norm: float) -> float:
    """torch's clip over plain or FSDP (DTensor) gradients; the total norm of sharded ones is a
    replicated DTensor, read as the whole tensor's norm on every rank."""
    import torch

    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    full = getattr(norm, "full_tensor", None)
    return float(full() if callable(full) else norm)


def all_reduce_sum(ctx: DistContext | None, values: Sequence[float]) -> list[float]:
    if ctx is None:
        return list(values)
    import torch
    import torch.distributed as dist

    nccl = dist.get_backend() == "nccl"  # which reduces GPU tensors only
    t = torch.tensor(list(values), dtype=torch.float64, device="cuda" if nccl else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def _owner(ctx: DistContext) -> Any:
    """The module whose parameters the optimizer holds (policy alone, or policy + critic)."""
    if ctx.critic is None:
        return ctx.model
    from torch import nn

    return nn.ModuleDict({"policy": ctx.model, "critic": ctx.critic})


def _sharded_state(ctx: DistContext, optimizer: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state = {"model": get_model_state_dict(ctx.model), "optim": get_optimizer_state_dict(_owner(ctx), optimizer)}
    if ctx.critic is not None:
        state["critic"] = get_model_state_dict(ctx.critic)
    return state


def save_sharded(ctx: DistContext, optimizer: Any, target: Any) -> None:
    """Every rank writes its part of the model, critic and optimizer state with torch.distributed.checkpoint."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_sharded_state(ctx, optimizer), checkpoint_id=str(target))


def load_sharded(ctx: DistContext, optimizer: Any, source: Any) -> None:
    """Restore model, critic and optimizer state in place from a `save_sharded` directory (every rank)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    state = _sharded_state(ctx, optimizer)
    dcp.load(state, checkpoint_id=str(source))
    set_model_state_dict(ctx.model, state["model"])
    if ctx.critic is not None:
        set_model_state_dict(ctx.critic, state["critic"])
    set_optimizer_state_dict(_owner(ctx), optimizer, state["optim"])


def shutdown(ctx: DistContext | None) -> None:
    if ctx is not None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
