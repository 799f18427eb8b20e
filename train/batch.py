"""The training stack's record types, nothing else: a training sample, a padded batch, the scores of the
no-grad pass, the per-token targets, and the parts the trainer trains with (`Components`, built by
setup.py). Estimators (train/estimators/) build `Targets`, updaters (train/updaters/) consume them; both
import these types from here, so neither sits above the other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.chat import ChatFormat

TrainConfig = Any
"""train/config.py's TrainConfig, as the updaters annotate it: config.py imports the updater registry (its refusals),
so the updaters name the type without importing it (one arrow, downward)."""


@dataclass(frozen=True)
class Sample:
    """One training sequence. `row[j]` is the turn-table row of token j (-1: not an action token)."""

    ids: np.ndarray            # int64 [L]
    row: np.ndarray            # int64 [L]
    rollout_logprobs: np.ndarray  # float64 [L], the sampler's logprobs on action tokens, 0 elsewhere

    @property
    def mask(self) -> np.ndarray:
        return self.row >= 0

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Batch:
    """Right-padded tensors of a list of samples (numpy; the trainer moves them to torch)."""

    ids: np.ndarray         # [B, T]
    attention: np.ndarray   # [B, T] 1 on real tokens
    row: np.ndarray         # [B, T] turn row per token, -1 elsewhere
    index: np.ndarray       # [B] sample indices


@dataclass
class Scored:
    """Per-sample shifted arrays from the no-grad pass before the update."""

    old_logprobs: list[np.ndarray]
    ref_logprobs: list[np.ndarray] | None
    old_values: list[np.ndarray] | None


@dataclass(frozen=True)
class Targets:
    """Per-sample shifted arrays the loss needs: advantages, value returns and where the critic trains."""

    advantages: list[np.ndarray]
    returns: list[np.ndarray] | None
    value_mask: list[np.ndarray] | None
    segments: list[np.ndarray]      # turn id (table row) of each position, for turn-level ratios
    loss_mask: list[np.ndarray] | None = None   # 0 where the actor loss skips an action token (overlong)
    is_weights: list[np.ndarray] | None = None  # truncated importance weights trainer/sampler per token
    traj_ids: list[np.ndarray] | None = None    # EPO: trajectory id of each position (-1 off action tokens)
    entropy_running: float | None = None        # EPO: running average entropy H̄ the band is centred on


@dataclass(frozen=True)
class Components:
    """What the trainer trains and rolls out with (torch types are not imported here: `import` stays light)."""

    model: Any        # torch.nn.Module (a peft model with LoRA)
    tokenizer: Any
    policy: Any       # agentgym Policy: shares `model` (hf) or holds its own copy (vllm)
    chat: ChatFormat
    critic: Any       # agentgym.train.critic.Critic | None
    ref: Any          # None, or a zero-arg callable returning a context manager that yields the reference model
    optimizer: Any    # torch.optim.Optimizer
    scheduler: Any    # torch LR scheduler | None
    device: Any       # torch.device
    env_id: str
    tools: list
    pad_id: int
    reward_range: tuple[float, float] | None = None  # [lo, hi] of a step's reward the env declares
