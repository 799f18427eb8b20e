"""The `algorithm:` section of the train config: the estimator and its discount, and one sub-section per
concern (gigpo, hgpo, gae, loss, value, regularisers, shaping, igpo, archer). `MOVED_ALGORITHM_KEYS` maps the
older flat keys to their sub-sections; the loader refuses a flat key with its new spelling.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from agentgym.errors import ConfigError


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class GigpoSection:
    """GiGPO's step groups (estimator gigpo, and hgpo built on it)."""

    step_weight: float = 1.0
    """w in A = A_episode + w·A_step."""
    similarity: float | None = None
    """Merge anchors whose texts are at least this similar (0-1); null = exact anchors."""

    def __post_init__(self) -> None:
        _check(self.similarity is None or 0 < self.similarity <= 1,
               f"algorithm.gigpo.similarity must be in (0, 1] or null, got {self.similarity}")


@dataclass(frozen=True)
class HgpoSection:
    """HGPO's hierarchy of step groups (estimator hgpo)."""

    levels: int = 2
    """K: step groups also by agreement of the last 1..K turns of context (0 = GiGPO's step groups)."""
    alpha: float = 1.0
    """Level weight w_k = (k + 1)^alpha (0 = all levels equal)."""

    def __post_init__(self) -> None:
        _check(self.levels >= 0, f"algorithm.hgpo.levels must be >= 0, got {self.levels}")


@dataclass(frozen=True)
class GaeSection:
    """The critic estimators (turn_gae, bi_level_gae)."""

    lam: float = 0.95
    """GAE λ across turns."""
    lam_token: float = 1.0
    """Bi-level GAE λ inside a turn."""
    whiten_advantages: bool = False
    """Normalise advantages to mean 0, std 1 over the batch's action tokens."""

    def __post_init__(self) -> None:
        _check(0.0 <= self.lam <= 1.0 and 0.0 <= self.lam_token <= 1.0,
               "algorithm.gae.lam and algorithm.gae.lam_token must be in [0, 1]")


@dataclass(frozen=True)
class LossSection:
    """The clipped policy-gradient surrogate."""

    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = None
    """Dual clip c (> 1) bounding the loss of negative advantages; null = off."""
    ratio_level: Literal["token", "sequence", "turn"] = "token"
    agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = \
        "token-mean"
    """How per-token losses are averaged into the batch loss."""
    tis_cap: float | None = None
    """Truncated importance sampling: weight each token's loss by min(p_trainer / p_sampler, tis_cap), correcting
    for the sampler's (vLLM, bf16) probabilities differing from the trainer's; null = off."""

    def __post_init__(self) -> None:
        _check(self.clip_low > 0 and self.clip_high > 0, "algorithm.loss.clip_low/clip_high must be > 0")
        _check(self.dual_clip is None or self.dual_clip > 1.0,
               f"algorithm.loss.dual_clip must be > 1 (e.g. 3.0) or null, got {self.dual_clip}")
        _check(self.tis_cap is None or self.tis_cap >= 1.0,
               f"algorithm.loss.tis_cap must be >= 1 (e.g. 2.0) or null, got {self.tis_cap}")


@dataclass(frozen=True)
class ValueSection:
    """The critic's value loss (model.critic != none)."""

    coef: float = 0.5
    clip: float | None = 0.2
    """Value clip range around the old values; null = unclipped."""
    clip_scale: Literal["absolute", "returns_std"] = "absolute"
    """"returns_std": the clip range is clip x the batch's std of value targets (reward scale free)."""


@dataclass(frozen=True)
class RegularisersSection:
    """Terms added to the policy loss: KL to the reference model, entropy bonus, EPO's entropy band."""

    kl_coef: float = 0.0
    kl_estimator: Literal["k1", "k3", "exact"] = "k3"
    """k1 / k3: estimates from the sampled tokens (or admissible pick); exact: the sum over every admissible
    candidate (admissible mode only: a turn's whole choice distribution is at hand there)."""
    entropy_coef: float = 0.0
    expert_coef: float = 0.0
    """Expert replay (admissible mode): each choice-update step adds this x the turn-mean cross-entropy of the
    expert's actions on `expert_episodes` of the warm start's demonstrations (the sft: section's), holding
    choices in states the RL batch does not visit (train/expert_replay.py). 0 = off."""
    expert_episodes: int = 2
    """Demonstrations drawn for each update (expert replay)."""
    epo_coef: float = 0.0
    """EPO: weight of the trajectory-level entropy bonus (0 = off); it adds to entropy_coef's token bonus, so set
    entropy_coef=0 for EPO alone."""
    epo_band: tuple[float, float] = (0.5, 1.5)
    """EPO entropy smoothing: keep the batch entropy within [lo, hi] x its running average."""
    epo_smooth_coef: float = 1.0
    """EPO: weight of the squared penalty for leaving the band."""
    epo_momentum: float = 0.9
    """EPO: running-average momentum of the entropy the band is centred on."""

    def __post_init__(self) -> None:
        _check(self.epo_coef >= 0 and self.epo_smooth_coef >= 0,
               "algorithm.regularisers.epo_coef and epo_smooth_coef must be >= 0")
        _check(self.expert_coef >= 0 and self.expert_episodes >= 1,
               f"algorithm.regularisers.expert_coef must be >= 0 and expert_episodes >= 1, got {self.expert_coef} and "
               f"{self.expert_episodes}")
        _check(0 < self.epo_band[0] <= 1 <= self.epo_band[1],
               f"algorithm.regularisers.epo_band must be [lo, hi] with 0 < lo <= 1 <= hi, got {list(self.epo_band)}")
        _check(0 <= self.epo_momentum < 1,
               f"algorithm.regularisers.epo_momentum must be in [0, 1), got {self.epo_momentum}")


@dataclass(frozen=True)
class ShapingSection:
    """Changes to the env's rewards before any estimator reads them."""

    invalid_penalty: float = 0.0
    invalid_penalty_mode: Literal["reward", "advantage"] = "reward"
    """"reward": subtract the penalty from the invalid turn's reward before returns are computed (it then
    also lowers every earlier turn's return); "advantage": subtract it from that turn's advantage only."""
    overlong: Literal["none", "mask", "penalty"] = "none"
    """Responses cut at rollout.max_new_tokens: "mask" leaves them out of the actor loss (DAPO); "penalty"
    subtracts a length penalty from the turn's reward (DAPO's soft overlong punishment)."""
    overlong_penalty: float = 1.0
    """Penalty at rollout.max_new_tokens tokens (overlong=penalty)."""
    overlong_buffer: int = 0
    """overlong=penalty: the penalty ramps up linearly over the last this-many tokens before the limit."""

    def __post_init__(self) -> None:
        _check(self.overlong_buffer >= 0 and self.overlong_penalty >= 0,
               "algorithm.shaping.overlong_buffer and algorithm.shaping.overlong_penalty must be >= 0")


@dataclass(frozen=True)
class IgpoSection:
    """IGPO's information-gain turn rewards."""

    coef: float = 0.0
    """Add coef x info gain (the rise of the policy's log-prob of the env's ground-truth answer over a turn) to
    each turn's reward, as reward component "info_gain"; 0 = off. Needs an env with info["ground_truth"]."""
    mode: Literal["logprob", "prob"] = "logprob"
    """Gain of the answer's mean token log-prob ("logprob") or of its probability exp(mean log-prob)."""

    def __post_init__(self) -> None:
        _check(self.coef >= 0, f"algorithm.igpo.coef must be >= 0, got {self.coef}")


@dataclass(frozen=True)
class ArcherSection:
    """ArCHer (algorithm.estimator=archer): an off-policy Q/V critic over turns, learnt by TD from a replay
    buffer with a Polyak-averaged target copy, and a token actor trained with A = min Q - min V per turn
    (train/estimators/archer_td.py has the formulas). The critic's backbone is a copy of the policy, or
    model.critic_model; its learning rate and gradient clip are optim.critic_lr and optim.critic_max_grad_norm."""

    buffer_size: int = 4096
    """Turns kept across iterations; the oldest go first."""
    critic_steps: int = 16
    """TD steps on the critic per iteration, each on critic_batch turns drawn from the buffer."""
    critic_batch: int = 64
    tau: float = 0.1
    """Polyak rate of the target critic after every critic step (1 = copy, 0 = frozen)."""
    warmup_iterations: int = 1
    """First iterations train the critic only; the actor starts once it has seen this many batches."""
    actor_loss: Literal["reinforce", "ppo"] = "reinforce"
    """reinforce: one gradient step per batch on -A * log pi(action) (ArCHer's actor; needs train.ppo_epochs=1
    and train.mini_batches=1, where PPO's clipped objective is exactly that); ppo: the clipped objective over
    train.ppo_epochs x train.mini_batches steps."""

    def __post_init__(self) -> None:
        _check(self.buffer_size >= 1 and self.critic_batch >= 1 and self.critic_steps >= 0,
               "algorithm.archer.buffer_size and critic_batch must be >= 1, critic_steps >= 0")
        _check(0.0 <= self.tau <= 1.0, f"algorithm.archer.tau must be in [0, 1], got {self.tau}")
        _check(self.warmup_iterations >= 0, "algorithm.archer.warmup_iterations must be >= 0")


# the flat keys of the algorithm section before it was split, and where each lives now
MOVED_ALGORITHM_KEYS = {
    "step_weight": "gigpo.step_weight", "similarity": "gigpo.similarity",
    "hgpo_levels": "hgpo.levels", "hgpo_alpha": "hgpo.alpha",
    "lam": "gae.lam", "lam_token": "gae.lam_token", "whiten_advantages": "gae.whiten_advantages",
    "clip_low": "loss.clip_low", "clip_high": "loss.clip_high", "dual_clip": "loss.dual_clip",
    "ratio_level": "loss.ratio_level", "loss_agg": "loss.agg", "tis_cap": "loss.tis_cap",
    "value_coef": "value.coef", "value_clip": "value.clip", "value_clip_scale": "value.clip_scale",
    **{k: f"regularisers.{k}" for k in ("kl_coef", "kl_estimator", "entropy_coef", "epo_coef", "epo_band",
                                        "epo_smooth_coef", "epo_momentum")},
    **{k: f"shaping.{k}" for k in ("invalid_penalty", "invalid_penalty_mode", "overlong", "overlong_penalty",
                                   "overlong_buffer")},
    "igpo_coef": "igpo.coef", "igpo_mode": "igpo.mode",
}


@dataclass(frozen=True)
class AlgorithmSection:
    estimator: str = "gigpo"
    """A registered estimator (train/estimators/__init__.py): gigpo, grpo, rloo, reinforce_pp, hgpo, turn_gae,
    bi_level_gae, or one a plug-in registered; `agentgym train --options` lists them with what each does."""
    gamma: float = 0.95
    """Turn discount (GiGPO step returns, REINFORCE++, GAE turn clock)."""
    norm: Literal["mean_std", "mean"] = "mean_std"
    """Group normalisation of the critic-free estimators: (R - mean) / std, or R - mean."""
    negative_scale: float = 1.0
    """Multiplies negative advantages after the estimator (every estimator, every updater): 1 keeps them,
    0 trains only on actions that beat their baseline, in between weighs pushing down less than pulling up."""
    episode_stats: Literal["trajectory", "turn"] = "trajectory"
    eps: float = 1e-6
    dynamic_sampling: bool = False
    """Drop groups without signal (see dynamic_sampling_keep) and roll out fresh tasks to refill the batch."""
    dynamic_sampling_keep: Literal["returns", "advantages"] = "returns"
    """What dynamic sampling keeps: `returns`, groups whose returns are not all equal (DAPO); `advantages`,
    groups where the critic-free estimator gives some turn a non-zero advantage (GiGPO's step groups can
    compare actions from one state inside a group whose returns are all equal)."""
    max_refill_rounds: int = 3
    turn_cap_schedule: tuple[tuple[int, int], ...] = ()
    """[[iteration, max_turns], ...]: from each iteration on, cap episodes at that many turns."""
    gigpo: GigpoSection = field(default_factory=GigpoSection)
    hgpo: HgpoSection = field(default_factory=HgpoSection)
    gae: GaeSection = field(default_factory=GaeSection)
    loss: LossSection = field(default_factory=LossSection)
    value: ValueSection = field(default_factory=ValueSection)
    regularisers: RegularisersSection = field(default_factory=RegularisersSection)
    shaping: ShapingSection = field(default_factory=ShapingSection)
    igpo: IgpoSection = field(default_factory=IgpoSection)
    archer: ArcherSection = field(default_factory=ArcherSection)
    """ArCHer's critic, buffer and actor (algorithm.estimator=archer)."""

    MOVED: typing.ClassVar[dict[str, str]] = MOVED_ALGORITHM_KEYS

    def __post_init__(self) -> None:
        _check(0.0 <= self.gamma <= 1.0, f"algorithm.gamma must be in [0, 1], got {self.gamma}")
        _check(0.0 <= self.negative_scale <= 1.0,
               f"algorithm.negative_scale must be in [0, 1] (1 keeps negative advantages), got {self.negative_scale}")
        its = [int(it) for it, _ in self.turn_cap_schedule]
        _check(its == sorted(its) and all(int(c) >= 1 for _, c in self.turn_cap_schedule),
               "algorithm.turn_cap_schedule must be [[iteration, max_turns], ...] sorted by iteration, caps >= 1")
