"""What every learner shares: the trainer's parts it trains (`LearnerContext`), the config sections an update
reads (`UpdateSections`), the `Learner` base class, and the batch figures logged beside an update."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from agentgym.train.batch import Sample, Scored, Targets

if TYPE_CHECKING:  # the sections' types; config.py (which validates them) imports nothing of learners/
    from agentgym.train.algorithm import AlgorithmSection
    from agentgym.train.config import OptimSection, RolloutSection, TrainConfig, TrainSection


@dataclass
class LearnerContext:
    """The trainer's parts a learner trains: `c`, its Components (model, critic, optimizer, chat, ...);
    `dist`, a train.distributed context or None; `sleep_engine()` frees a separate rollout engine's memory
    before a token update. The config is not among them: a learner takes its sections (`UpdateSections`)."""

    c: Any
    dist: Any = None
    sleep_engine: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class UpdateSections:
    """What of the training config an update reads, and nothing else of it: `algorithm` (estimator, loss,
    regularisers), `optim` (rates, gradient clips), `train` (ppo_epochs, mini_batches, micro_batch_size,
    seed) and `rollout` (how the samples were made: temperature, layout, history_turns, max_new_tokens).
    The updaters' functions read these four under the same names (`cfg.algorithm`, `cfg.train.seed`, ...)."""

    algorithm: AlgorithmSection
    optim: OptimSection
    train: TrainSection
    rollout: RolloutSection

    @classmethod
    def of(cls, config: TrainConfig) -> UpdateSections:
        return cls(config.algorithm, config.optim, config.train, config.rollout)


class Learner:
    """One iteration's update. Subclasses set `name` and implement `update`; one that needs more than its
    `UpdateSections` (a section, or a part built from one) takes it in `__init__` and says so in `from_config`."""

    name = ""

    def __init__(self, ctx: LearnerContext, sections: UpdateSections):
        self.ctx, self.c, self.cfg = ctx, ctx.c, sections

    @classmethod
    def from_config(cls, config: TrainConfig, ctx: LearnerContext) -> Learner:
        """The learner of `config`: the one place it reads the whole config, to hand over its sections."""
        return cls(ctx, UpdateSections.of(config))

    def update(self, collected: Any, samples: list[Sample], iteration: int, metrics: dict[str, Any]) -> bool:
        """Train on `collected` (its `samples` built in the trainer's layout), adding figures to `metrics`;
        True when the weights changed and must reach a rollout engine with its own copy."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (merged into trainer.pt's state; keys must not clash with the trainer's)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from a checkpoint's state (the whole trainer.pt state; read only this learner's keys)."""


def batch_stats(samples: Sequence[Sample], scored: Scored, targets: Targets, tis_cap: float | None = None,
                fresh: Sequence[np.ndarray] | None = None) -> dict[str, float]:
    """Advantage spread; how far the sampler's log-probs are from the trainer's (both at the sampling
    temperature; only over the `fresh` positions when given: async turns of the current weights), the
    truncated importance weights and overlong masking. With `fresh` and no fresh token, the gap is not
    measurable and logprob_diff is left out (a 0.0 would read as "in sync"); the async version lag is the
    stale_weights guard's figure then."""
    masks = [s.mask[1:] for s in samples]                      # per sample: [L-1] bool, action positions
    same = masks if fresh is None else [m & f for m, f in zip(masks, fresh)]
    adv = np.concatenate([a[m] for a, m in zip(targets.advantages, masks)]) if samples else np.zeros(0)  # [N actions]
    diff = np.concatenate([np.abs(o[m] - s.rollout_logprobs[1:][m]) for o, s, m
                           in zip(scored.old_logprobs, samples, same)]) if samples else np.zeros(0)
    diff = diff[np.isfinite(diff)]  # [N' <= N] a sampler may not report some log-probs (NaN)
    out = {"advantage_mean": float(adv.mean()) if adv.size else 0.0,
           "advantage_std": float(adv.std()) if adv.size else 0.0,
           "zero_advantage_share": float(np.mean(adv == 0)) if adv.size else 0.0,
           "logprob_diff": float(diff.mean()) if diff.size else 0.0,
           "logprob_diff_max": float(diff.max()) if diff.size else 0.0, "samples": float(len(samples))}
    if fresh is not None:
        n = sum(int(m.sum()) for m in masks)
        out["async/fresh_token_share"] = sum(int(m.sum()) for m in same) / n if n else 0.0
        if not diff.size:
            del out["logprob_diff"], out["logprob_diff_max"]
    if targets.is_weights is not None and adv.size:
        w = np.concatenate([w[m] for w, m in zip(targets.is_weights, masks)])  # [N actions]
        out.update({"tis/weight_mean": float(w.mean()), "tis/weight_min": float(w.min()),
                    "tis/capped_fraction": float(np.mean(w >= (tis_cap or np.inf) * (1 - 1e-9)))})
    if targets.loss_mask is not None:
        out["overlong/masked_tokens"] = float(sum(float((m & (lm == 0)).sum())
                                                  for m, lm in zip(masks, targets.loss_mask)))
    return out


def fresh_tokens(batch: Sequence[Any], samples: Sequence[Sample], version: int | None) -> list[np.ndarray] | None:
    """Async: per sample, the action positions generated by weights `version` (the current ones). Only these
    must match the trainer's log-probs (the stale_weights guard); older turns differ by design and are
    weighted instead. None: every turn is the current weights' (sync)."""
    if version is None:
        return None
    versions = np.array([t.policy_version for tr in batch for t in tr.turns], dtype=np.int64)  # [turn rows]
    return [versions[np.maximum(s.row[1:], 0)] == version for s in samples]  # per sample [L_i - 1] bool
