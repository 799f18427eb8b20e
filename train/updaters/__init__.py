"""The update seam: which updater a config trains with, and the options each one cannot honour.

One updater is chosen once from the config (`updater_for`), and a config that asks it for something it
does not do is refused at load with the option's name and the fix (`refuse_unsupported`, called by
`TrainConfig`), never trained without it:
  - token_ppo   free generation (rollout.action_mode=generate): clipped PPO over the generated tokens
                (train/updaters/token_ppo.py), with every option of the algorithm section.
  - choice_ppo  admissible mode: clipped PPO over the renormalised distribution of the env's admissible
                actions, one ratio per turn (train/updaters/choice_ppo.py); critic-free turn advantages, clip and
                entropy bonus only.
Room is left for more (an off-policy ArCHer updater, an asynchronous one): each adds its entry and its
refusals here.
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


def _choice_refusals() -> tuple[Refusal, ...]:
    generate = "or train with rollout.action_mode=generate (token PPO)"
    return (
        Refusal("algorithm.estimator", lambda c: get_estimator(c.algorithm.estimator).needs_critic,
                f"the choice update takes per-turn advantages without a critic: use a critic-free estimator "
                f"({', '.join(n for n, e in estimators().items() if not e.needs_critic)}), {generate}"),
        Refusal("model.critic", lambda c: c.model.critic != "none",
                f"the choice update trains no critic: use a critic-free estimator and model.critic=none, {generate}"),
        Refusal("algorithm.kl_coef", lambda c: c.algorithm.kl_coef > 0, f"set algorithm.kl_coef=0, {generate}"),
        Refusal("algorithm.igpo_coef", lambda c: c.algorithm.igpo_coef > 0, f"set algorithm.igpo_coef=0, {generate}"),
        Refusal("algorithm.epo_coef", lambda c: c.algorithm.epo_coef > 0,
                f"set algorithm.epo_coef=0 (algorithm.entropy_coef works here), {generate}"),
        Refusal("algorithm.tis_cap", lambda c: c.algorithm.tis_cap is not None,
                f"set algorithm.tis_cap=null (the trainer scores the choices itself: nothing to correct), {generate}"),
        Refusal("algorithm.overlong", lambda c: c.algorithm.overlong != "none",
                f"set algorithm.overlong=none (an admissible action is never cut off), {generate}"),
        Refusal("algorithm.dual_clip", lambda c: c.algorithm.dual_clip is not None,
                f"set algorithm.dual_clip=null, {generate}"),
        Refusal("algorithm.ratio_level", lambda c: c.algorithm.ratio_level == "sequence",
                f"the choice ratio is one per turn: set algorithm.ratio_level=token or turn, {generate}"),
        Refusal("algorithm.loss_agg", lambda c: c.algorithm.loss_agg != "token-mean",
                f"the choice loss is a mean over turns: leave algorithm.loss_agg=token-mean, {generate}"),
        Refusal("algorithm.whiten_advantages", lambda c: c.algorithm.whiten_advantages,
                f"set algorithm.whiten_advantages=false (GAE only), {generate}"),
    )


UPDATERS: dict[str, Updater] = {
    "token_ppo": Updater("token_ppo", "clipped PPO over generated tokens (free generation)"),
    "choice_ppo": Updater("choice_ppo", "clipped PPO over the env's admissible actions (admissible mode)",
                          _choice_refusals()),
}


def updater_for(config: Any) -> Updater:
    """The updater that trains `config` (a TrainConfig)."""
    return UPDATERS["choice_ppo" if config.rollout.action_mode == "admissible" else "token_ppo"]


def refuse_unsupported(config: Any) -> None:
    """A ConfigError for the first option `config` sets that its updater cannot honour."""
    updater = updater_for(config)
    for refusal in updater.refusals:
        if refusal.is_set(config):
            raise ConfigError(f"{refusal.option} is not supported by the {updater.name} updater "
                              f"(rollout.action_mode={config.rollout.action_mode}): {refusal.fix}")
