"""The update seam: which updater a config trains with, and the options each one cannot honour.

One updater is chosen once from the config (`updater_for`), and a config that asks it for something it
does not do is refused at load with the option's name and the fix (`refuse_unsupported`, called by
`TrainConfig`), never trained without it:
  - token_ppo   free generation (rollout.action_mode=generate): clipped PPO over the generated tokens
                (train/updaters/token_ppo.py), with every option of the algorithm section.
  - choice_ppo  admissible mode: clipped PPO over the renormalised distribution of the env's admissible
                actions, one ratio per turn (train/updaters/choice_ppo.py); critic-free turn advantages, clip and
                entropy bonus only.
  - archer      algorithm.estimator=archer in free generation: an off-policy Q/V critic over turns learnt
                from a replay buffer, the token actor trained with its turn advantages
                (train/updaters/archer.py); token PPO's loss options, no GAE critic, one process.
  - lookahead   rollout.lookahead: the choice update of the looked-ahead turns (train/updaters/lookahead.py);
                the choice update's refusals.
Each entry names the learner class that runs it (train/learners/): adding an updater is its learner's file,
its entry here (with its refusals) and its test.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from agentgym.errors import ConfigError
from agentgym.train.estimators import estimators, get_estimator


@dataclass(frozen=True)
class Refusal:
    option: str                   # the dotted option, as a user writes it
    is_set: Callable[[Any], bool]  # TrainConfig -> whether the config asks for it
    fix: str


@dataclass(frozen=True)
class Updater:
    name: str
    doc: str
    refusals: tuple[Refusal, ...] = ()
    learner: str = ""  # "module:Class" of the train/learners/ class that runs it (imported when built)


def _choice_refusals() -> tuple[Refusal, ...]:
    generate = "or train with rollout.action_mode=generate (token PPO)"
    return (
        Refusal("algorithm.estimator", lambda c: get_estimator(c.algorithm.estimator).turn_advantages_ref is None,
                f"the choice update takes per-turn advantages without a critic: use a critic-free estimator "
                f"({', '.join(n for n, e in estimators().items() if e.turn_advantages_ref is not None)}), "
                f"{generate}"),
        Refusal("model.critic", lambda c: c.model.critic != "none",
                f"the choice update trains no critic: use a critic-free estimator and model.critic=none, {generate}"),
        Refusal("algorithm.igpo.coef", lambda c: c.algorithm.igpo.coef > 0, f"set algorithm.igpo.coef=0, {generate}"),
        Refusal("algorithm.regularisers.epo_coef", lambda c: c.algorithm.regularisers.epo_coef > 0,
                f"set algorithm.regularisers.epo_coef=0 (algorithm.regularisers.entropy_coef works here), {generate}"),
        Refusal("algorithm.loss.tis_cap", lambda c: c.algorithm.loss.tis_cap is not None,
                f"set algorithm.loss.tis_cap=null (the trainer scores the choices itself: nothing to correct), "
                f"{generate}"),
        Refusal("algorithm.shaping.overlong", lambda c: c.algorithm.shaping.overlong != "none",
                f"set algorithm.shaping.overlong=none (an admissible action is never cut off), {generate}"),
        Refusal("algorithm.loss.dual_clip", lambda c: c.algorithm.loss.dual_clip is not None,
                f"set algorithm.loss.dual_clip=null, {generate}"),
        Refusal("algorithm.loss.ratio_level", lambda c: c.algorithm.loss.ratio_level == "sequence",
                f"the choice ratio is one per turn: set algorithm.loss.ratio_level=token or turn, {generate}"),
        Refusal("algorithm.loss.agg", lambda c: c.algorithm.loss.agg not in ("token-mean", "seq-mean-token-mean"),
                f"the choice loss is a mean over turns (token-mean) or over trajectories of their turn-means "
                f"(seq-mean-token-mean): set one of those, {generate}"),
        Refusal("algorithm.gae.whiten_advantages", lambda c: c.algorithm.gae.whiten_advantages,
                f"set algorithm.gae.whiten_advantages=false (GAE only), {generate}"),
    )


def _token_refusals() -> tuple[Refusal, ...]:
    return (
        Refusal("algorithm.regularisers.kl_estimator",
                lambda c: c.algorithm.regularisers.kl_coef > 0 and c.algorithm.regularisers.kl_estimator == "exact",
                "token PPO (and ArCHer's token actor) estimates the KL from the sampled tokens: set "
                "algorithm.regularisers.kl_estimator=k1 or k3 (exact sums over the admissible actions: "
                "rollout.action_mode=admissible)"),
        Refusal("algorithm.regularisers.expert_coef", lambda c: c.algorithm.regularisers.expert_coef > 0,
                "expert replay trains the expert's choices among admissible actions: set "
                "algorithm.regularisers.expert_coef=0, or train with rollout.action_mode=admissible"),
        Refusal("train.token_budget", lambda c: c.train.token_budget is not None and (
                    c.model.critic != "none" or c.train.distributed != "none"),
                "packed micro-batches run neither a critic nor a distributed wrapper: unset train.token_budget, "
                "or set model.critic=none and train.distributed=none"),
    )


def _archer_refusals() -> tuple[Refusal, ...]:
    return _token_refusals() + (  # the actor is token PPO's
        Refusal("model.critic", lambda c: c.model.critic != "none",
                "ArCHer trains its own Q/V critic (a copy of the policy, or model.critic_model): set model.critic=none"),
        Refusal("train.distributed", lambda c: c.train.distributed != "none",
                "the ArCHer critic and replay buffer live in one process: set train.distributed=none"),
        Refusal("algorithm.igpo.coef", lambda c: c.algorithm.igpo.coef > 0,
                "the replay buffer stores the env's turn rewards: set algorithm.igpo.coef=0"),
        Refusal("algorithm.regularisers.epo_coef", lambda c: c.algorithm.regularisers.epo_coef > 0,
                "set algorithm.regularisers.epo_coef=0 (algorithm.regularisers.entropy_coef works with ArCHer)"),
        Refusal("algorithm.gae.whiten_advantages", lambda c: c.algorithm.gae.whiten_advantages,
                "set algorithm.gae.whiten_advantages=false (GAE only)"),
        Refusal("train.ppo_epochs", lambda c: c.algorithm.archer.actor_loss == "reinforce" and c.train.ppo_epochs != 1,
                "ArCHer's REINFORCE actor takes one step per batch: set train.ppo_epochs=1, or "
                "algorithm.archer.actor_loss=ppo"),
        Refusal("train.mini_batches", lambda c: c.algorithm.archer.actor_loss == "reinforce" and c.train.mini_batches != 1,
                "ArCHer's REINFORCE actor takes one step per batch: set train.mini_batches=1, or "
                "algorithm.archer.actor_loss=ppo"),
    )


_L = "agentgym.train.learners."
UPDATERS: dict[str, Updater] = {
    "token_ppo": Updater("token_ppo", "clipped PPO over generated tokens (free generation)", _token_refusals(),
                         _L + "token_ppo:TokenPPO"),
    "choice_ppo": Updater("choice_ppo", "clipped PPO over the env's admissible actions (admissible mode)",
                          _choice_refusals(), _L + "choice:ChoicePPO"),
    "archer": Updater("archer", "off-policy turn critic from a replay buffer + token actor (ArCHer)",
                      _archer_refusals(), _L + "archer:ArcherActorCritic"),
    "lookahead": Updater("lookahead", "choice PPO over the looked-ahead turns' play-outs (rollout.lookahead)",
                         _choice_refusals(), _L + "lookahead:LookaheadChoice"),
}


def register_updater(updater: Updater) -> None:
    """Add (or replace) an updater; `updater_for` chooses it when an estimator names it (Estimator.updater)."""
    UPDATERS[updater.name] = updater


def updater_for(config: Any) -> Updater:
    """The updater that trains `config` (a TrainConfig)."""
    if config.rollout.action_mode == "admissible":
        return UPDATERS["lookahead" if config.rollout.lookahead else "choice_ppo"]
    return UPDATERS[get_estimator(config.algorithm.estimator).updater or "token_ppo"]


def refuse_unsupported(config: Any) -> None:
    """A ConfigError for the first option `config` sets that its updater cannot honour."""
    updater = updater_for(config)
    for refusal in updater.refusals:
        if refusal.is_set(config):
            raise ConfigError(f"{refusal.option} is not supported by the {updater.name} updater "
                              f"(rollout.action_mode={config.rollout.action_mode}): {refusal.fix}")
