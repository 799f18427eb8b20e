"""PPO-style losses on [batch, time] tensors with a mask over model (action) tokens.

Everything here is a pure function of tensors. Shapes: `logprobs`, `old_logprobs`, `advantages`,
`mask` are [B, T]; `mask` is 1 on action tokens and 0 on prompt/observation/padding tokens, so
observation tokens never enter the actor or critic loss.

Importance ratios (`ratio_level`):
    token     r_j = exp(log π(a_j) − log π_old(a_j))                             (PPO)
    sequence  r_i = exp(mean_j∈i (log π − log π_old)), one ratio for a whole sample  (GSPO)
    turn      the same geometric mean over the tokens of one turn (`segments` gives turn ids)
Clipped surrogate: L = max(−A r, −A clip(r, 1−ε_low, 1+ε_high)); dual clip (c > 1) caps L at
−c·A for A < 0. KL to a reference: k1 = log π − log π_ref, k3 = exp(log π_ref − log π) − (log π_ref −
log π) − 1 (Schulman's unbiased, non-negative estimator).

Decoupled PPO (AReaL, for train.mode=async, where a turn may come from weights several updates old):
    J = E_{a ~ π_behav} [ w · min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) ],
    r = π_θ(a) / π_prox(a),   w = min(π_prox(a) / π_behav(a), cap)
π_prox is the proximal policy, the trainer's weights at the start of the update (the no-grad scoring pass), so
the clip keeps each update near the current policy however stale the data; π_behav is the version that generated
the turn (its log-probs recorded at generation) and enters only through the no-gradient weight w, capped as
truncated IS is (algorithm.loss.tis_cap). With fresh data π_behav = π_prox up to kernel noise and it is plain PPO
with TIS (`decoupled_ppo_loss`; the trainer gets the same weights from `targets.truncated_is_weights`).

Aggregation (`agg`), with `denom` letting gradient accumulation divide by the whole batch's count:
    token-mean            Σ x·m / Σ m
    seq-mean-token-mean   mean over samples of (Σ_j x·m / Σ_j m)
    seq-mean-token-sum    mean over samples of Σ_j x·m
    seq-mean-token-sum-norm  Σ x·m / (B · T)   (Dr. GRPO's constant normaliser)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

Agg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
RatioLevel = Literal["token", "sequence", "turn"]
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
RATIO_LEVELS = ("token", "sequence", "turn")
KL_ESTIMATORS = ("k1", "k3")


def aggregate(x: torch.Tensor, mask: torch.Tensor, agg: Agg = "token-mean", denom: float | None = None
              ) -> torch.Tensor:
    """Reduce a [B, T] tensor over masked positions (see the module docstring).

    `denom`, when given, replaces the divisor (token count for token-mean, sample count for the
    seq-mean modes, B·T for the -norm mode) so micro-batch losses sum to the full-batch loss.
    """
    mask = mask.to(x.dtype)                                    # x, mask: [B, T] -> a scalar
    if agg == "token-mean":
        return (x * mask).sum() / (denom if denom is not None else mask.sum().clamp(min=1.0))
    if agg == "seq-mean-token-mean":
        per_seq = (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
        return per_seq.sum() / (denom if denom is not None else max(x.shape[0], 1))
    if agg == "seq-mean-token-sum":
        return (x * mask).sum() / (denom if denom is not None else max(x.shape[0], 1))
    if agg == "seq-mean-token-sum-norm":
        return (x * mask).sum() / (denom if denom is not None else max(x.numel(), 1))
    raise ValueError(f"agg must be one of {AGG_MODES}, got {agg!r}")


def segment_mean(x: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """Replace each masked element by the mean of x over the masked elements of its segment.

    `segments` [B, T] holds non-negative segment ids (unique across the batch); unmasked positions
    are ignored and get 0.
    """
    seg = torch.where(mask.bool(), segments, torch.zeros_like(segments)).reshape(-1)  # [B*T] segment ids
    n_seg = int(seg.max().item()) + 1 if seg.numel() else 1
    m = mask.reshape(-1).to(x.dtype)                                                   # [B*T]
    sums = torch.zeros(n_seg, dtype=x.dtype, device=x.device).index_add(0, seg, x.reshape(-1) * m)  # [S]
    counts = torch.zeros(n_seg, dtype=x.dtype, device=x.device).index_add(0, seg, m)               # [S]
    means = sums / counts.clamp(min=1.0)                                               # [S]
    return (means[seg] * m).reshape(x.shape)                                           # [B, T]


def log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor,
              ratio_level: RatioLevel = "token", segments: torch.Tensor | None = None) -> torch.Tensor:
    """log r per token at the chosen level (sequence/turn: the segment mean of the token log-ratios)."""
    diff = (logprobs - old_logprobs) * mask       # [B, T] log π_θ - log π_old on action tokens, 0 elsewhere
    if ratio_level == "token":
        return diff
    if ratio_level == "sequence":
        rows = torch.arange(diff.shape[0], device=diff.device).unsqueeze(-1).expand_as(diff)  # [B, T] row id
        return segment_mean(diff, mask, rows)
    if ratio_level == "turn":
        if segments is None:
            raise ValueError("ratio_level='turn' needs `segments` (the turn id of each token)")
        return segment_mean(diff, mask, segments)
    raise ValueError(f"ratio_level must be one of {RATIO_LEVELS}, got {ratio_level!r}")


@dataclass(frozen=True)
class PolicyLossOut:
    loss: torch.Tensor          # the aggregated clipped surrogate (to be minimised)
    clip_fraction: float        # fraction of action tokens whose ratio was clipped
    approx_kl: float            # mean k3 between old and new policy on action tokens
    ratio_mean: float


def ppo_policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, *, clip_low: float = 0.2, clip_high: float = 0.2,
                    dual_clip: float | None = None, ratio_level: RatioLevel = "token",
                    segments: torch.Tensor | None = None, agg: Agg = "token-mean",
                    denom: float | None = None, weights: torch.Tensor | None = None) -> PolicyLossOut:
    """PPO clipped surrogate with token-, sequence- or turn-level ratios and optional dual clip.

    `weights` (no gradient) multiply each token's loss: truncated importance weights that correct for
    the sampler's probabilities differing from `old_logprobs` (`targets.truncated_is_weights`)."""
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (e.g. 3.0), got {dual_clip}")
    # every tensor here: [B, T] (samples x shifted positions), the loss taken over `mask`'s action tokens
    lr = log_ratio(logprobs, old_logprobs, mask, ratio_level, segments)
    ratio = torch.exp(lr.clamp(-20.0, 20.0))                                 # r = π_θ / π_old
    loss1 = -advantages * ratio                                              # -A r
    loss2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)       # -A clip(r, 1-ε_lo, 1+ε_hi)
    per_token = torch.maximum(loss1, loss2)                                  # the pessimistic of the two
    if dual_clip is not None:
        capped = torch.minimum(per_token, -advantages * dual_clip)
        per_token = torch.where(advantages < 0, capped, per_token)
    if weights is not None:
        per_token = per_token * weights.detach()
    with torch.no_grad():
        m = mask.bool()
        n = m.sum().clamp(min=1)
        clipped = (loss2 > loss1) & m
        d = (old_logprobs - logprobs)[m]                                    # [N action tokens]
        approx_kl = (torch.exp(d) - d - 1).sum() / n
        stats = (clipped.sum() / n).item(), approx_kl.item(), (ratio[m].sum() / n).item()
    return PolicyLossOut(aggregate(per_token, mask, agg, denom), *stats)


def behaviour_weights(proximal_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor,
                      cap: float) -> torch.Tensor:
    """Decoupled PPO's w = min(π_prox / π_behav, cap) per token, no gradient; 1 off `mask` and where the
    behaviour policy reported no log-prob (NaN)."""
    if cap < 1.0:
        raise ValueError(f"the behaviour weight cap must be >= 1 (e.g. 2.0), got {cap}")
    known = mask.bool() & torch.isfinite(behaviour_logprobs)                   # [B, T]
    diff = torch.where(known, proximal_logprobs - torch.nan_to_num(behaviour_logprobs), torch.zeros_like(mask))  # [B, T]
    return torch.exp(diff.clamp(max=math.log(cap))).detach()                    # [B, T] w in (0, cap]


def decoupled_ppo_loss(logprobs: torch.Tensor, proximal_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor,
                       advantages: torch.Tensor, mask: torch.Tensor, *, cap: float, clip_low: float = 0.2,
                       clip_high: float = 0.2, dual_clip: float | None = None, ratio_level: RatioLevel = "token",
                       segments: torch.Tensor | None = None, agg: Agg = "token-mean",
                       denom: float | None = None) -> PolicyLossOut:
    """AReaL's decoupled PPO (module docstring): the clipped surrogate of π_θ against the proximal policy,
    weighted by the capped behaviour importance weight min(π_prox / π_behav, cap)."""
    w = behaviour_weights(proximal_logprobs, behaviour_logprobs, mask, cap)  # [B, T], no gradient
    return ppo_policy_loss(logprobs, proximal_logprobs, advantages, mask, clip_low=clip_low, clip_high=clip_high,
                           dual_clip=dual_clip, ratio_level=ratio_level, segments=segments, agg=agg, denom=denom,
                           weights=w)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL(π || π_ref) estimate: k1 = log π − log π_ref; k3 = e^(−k1) + k1 − 1 (≥ 0)."""
    k1 = logprobs - ref_logprobs                     # [B, T] (or any shape: elementwise)
    if estimator == "k1":
        return k1
    if estimator == "k3":
        neg = (-k1).clamp(-20.0, 20.0)               # log π_ref - log π, kept finite
        return torch.exp(neg) - neg - 1.0            # k3 >= 0, same shape as k1
    raise ValueError(f"kl estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dimension, per position."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # [..., V]
    return -(logp.exp() * logp).sum(-1)               # [...]


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float | None = 0.2, agg: Agg = "token-mean", denom: float | None = None) -> torch.Tensor:
    """Clipped value loss: ½ max((V − R)², (clip(V, V_old ± ε) − R)²), aggregated over `mask`.

    `clip=None` gives the plain ½ (V − R)². The mask selects where the critic is trained (turn-level
    GAE: the state position of each turn; bi-level: every action token).
    """
    err = (values - returns) ** 2                                            # [B, T]
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)      # [B, T] V_old ± ε
        err = torch.maximum(err, (clipped - returns) ** 2)                   # [B, T] the pessimistic error
    return 0.5 * aggregate(err, mask, agg, denom)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature)[targets], memory-light (no [B, T, V] log-softmax kept)."""
    logits = logits.float()                                                  # [N, V] (or [B, T, V])
    if temperature != 1.0:
        logits = logits / temperature
    picked = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1)     # [N] the target's logit
    return picked - torch.logsumexp(logits, dim=-1)                          # [N] log p(target)



# ------------------------------------------------------------------------------ EPO

@dataclass(frozen=True)
class EpoOut:
    loss: torch.Tensor          # −β_eff · H + λ · band penalty (to be minimised)
    entropy: float              # H, the mean over trajectories of each trajectory's mean token entropy
    weight: float               # β_eff, the adaptive entropy weight used


def trajectory_entropy(entropy: torch.Tensor, mask: torch.Tensor, traj: torch.Tensor) -> torch.Tensor:
    """H = (1/N) Σ_i H(τ_i), H(τ_i) = mean entropy over the action tokens of all turns of trajectory i.

    `entropy`, `mask`, `traj` are [B, T]; `traj` holds non-negative trajectory ids, so the turns of one
    trajectory count together even when the step layout puts each turn in its own sample."""
    m = mask.to(entropy.dtype)                                                  # [B, T]
    flat = torch.where(mask.bool(), traj, torch.zeros_like(traj)).reshape(-1)   # [B*T] trajectory ids
    n = int(flat.max().item()) + 1 if flat.numel() else 1                       # N_ids
    sums = torch.zeros(n, dtype=entropy.dtype, device=entropy.device).index_add(0, flat, (entropy * m).reshape(-1))
    counts = torch.zeros(n, dtype=entropy.dtype, device=entropy.device).index_add(0, flat, m.reshape(-1))
    present = counts > 0                                                        # [N_ids] ids with action tokens
    if not bool(present.any()):
        return entropy.new_zeros(())
    return (sums[present] / counts[present]).mean()                             # scalar: mean of H(τ_i)


def epo_regulariser(entropy: torch.Tensor, mask: torch.Tensor, traj: torch.Tensor, coef: float,
                    running: float | None, band: tuple[float, float] = (0.5, 1.5), smooth_coef: float = 1.0,
                    max_boost: float = 2.0) -> EpoOut:
    """EPO's entropy terms for multi-turn agents (entropy-regularised policy optimisation):

        L_EPO = −β_eff · H  +  λ · ( relu(κ_lo·H̄ − H)² + relu(H − κ_hi·H̄)² )
        β_eff = β · min(max_boost, H̄ / H)

    H is `trajectory_entropy` (entropy regularised over whole trajectories, not per turn); H̄ is the
    running average of past batches' H (`running`, None before the first update: then no smoothing and
    β_eff = β). The smoothing term keeps H inside the band [κ_lo, κ_hi]·H̄ (no collapse, no blow-up,
    0 inside it), and the adaptive weight pushes harder the further entropy falls below its history.
    (Written from the paper's description; its reference code was not reachable here.)
    """
    h = trajectory_entropy(entropy, mask, traj)  # scalar H (with gradient); running, weight: python floats
    if running is None or running <= 0:
        return EpoOut(-coef * h, float(h.item()), coef)
    hv = max(float(h.item()), 1e-8)
    weight = coef * min(max_boost, running / hv)
    lo, hi = band
    penalty = torch.relu(lo * running - h) ** 2 + torch.relu(h - hi * running) ** 2
    return EpoOut(-weight * h + smooth_coef * penalty, float(h.item()), weight)


def running_entropy(previous: float | None, batch_entropy: float, momentum: float) -> float:
    """H̄ ← m·H̄ + (1 − m)·H (the first batch starts the average)."""
    return batch_entropy if previous is None else momentum * previous + (1.0 - momentum) * batch_entropy
