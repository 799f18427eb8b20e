"""The estimator registry: one entry per advantage estimator, read by config validation, the trainer's
targets, the CLI and the README.

An entry names the estimator and says what it needs:
  - `turn_advantages(cfg, table, trajectories, reward_penalty) -> np.ndarray`: per-turn advantages from the
    turn table (the critic-free estimators; the choice update of admissible mode can only use these);
  - or `targets(cfg, table, trajectories, segments, scored, final_values) -> Targets`: per-token targets
    that read the critic's values (GAE);
  - `needs_critic` (config refuses it without `model.critic`), `needs_groups` (G >= 2 rollouts of a task).

Adding an estimator is one `register_estimator(...)` call and its test: the config accepts the name,
`agentgym train --options` lists it, the trainer runs it. The built-ins below name their functions in
train/estimators/targets.py as "module:function" strings, so validating a config imports no torch.

    from agentgym.train.estimators import register_estimator
    register_estimator("mean_baseline", turn_advantages=lambda cfg, table, trajs, penalty: ...,
                       needs_groups=True, doc="episode return minus the group mean")
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Union

from agentgym.errors import ConfigError

# (AlgorithmSection, TurnTable, Sequence[Trajectory], reward_penalty) -> np.ndarray, or "module:function"
TurnAdvantages = Union[Callable[..., Any], str]
# (AlgorithmSection, TurnTable, trajectories, segments, Scored, final_values) -> Targets, or "module:function"
TargetsBuilder = Union[Callable[..., Any], str]


def _resolve(ref: Any) -> Any:
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Estimator:
    name: str
    doc: str
    turn_advantages_ref: TurnAdvantages | None = None
    targets_ref: TargetsBuilder | None = None
    needs_critic: bool = False
    needs_groups: bool = False

    @property
    def turn_advantages(self) -> Callable[..., Any] | None:
        return _resolve(self.turn_advantages_ref)

    @property
    def targets(self) -> Callable[..., Any] | None:
        return _resolve(self.targets_ref)


_REGISTRY: dict[str, Estimator] = {}


def register_estimator(name: str, *, doc: str, turn_advantages: TurnAdvantages | None = None,
                       targets: TargetsBuilder | None = None, needs_critic: bool = False,
                       needs_groups: bool = False) -> Estimator:
    """Add an estimator under `name` (re-registering a name replaces it). Exactly one of `turn_advantages`
    (critic-free, per turn) and `targets` (per token, may read the critic) is given."""
    if (turn_advantages is None) == (targets is None):
        raise ValueError(f"estimator {name!r}: give exactly one of turn_advantages= and targets=")
    if targets is not None and not needs_critic:
        raise ValueError(f"estimator {name!r}: a targets= builder reads the critic; set needs_critic=True, or "
                         "give turn_advantages= instead")
    entry = Estimator(name, doc, turn_advantages, targets, needs_critic, needs_groups)
    _REGISTRY[name] = entry
    return entry


def estimators() -> dict[str, Estimator]:
    """Every registered estimator, by name (the built-ins first)."""
    return dict(_REGISTRY)


def get_estimator(name: str) -> Estimator:
    """The entry for `name`, or a ConfigError naming the known ones (with a did-you-mean)."""
    known = estimators()
    if name in known:
        return known[name]
    near = difflib.get_close_matches(name, list(known), n=1)
    hint = f" Did you mean {near[0]!r}?" if near else ""
    raise ConfigError(f"algorithm.estimator={name!r} is not a registered estimator.{hint} Known: {', '.join(known)}")


_T = "agentgym.train.estimators.targets:"
register_estimator("gigpo", turn_advantages=_T + "gigpo_turns", needs_groups=True,
                   doc="GiGPO: episode advantage (GRPO) + step_weight x the turn's return normalised among turns "
                       "of the group that act from the same anchor state")
register_estimator("grpo", turn_advantages=_T + "grpo_turns", needs_groups=True,
                   doc="GRPO: the episode return normalised within the task's group, on every turn")
register_estimator("rloo", turn_advantages=_T + "rloo_turns", needs_groups=True,
                   doc="RLOO: the episode return minus the mean of the group's other episodes")
register_estimator("reinforce_pp", turn_advantages=_T + "reinforce_pp_turns",
                   doc="REINFORCE++: discounted turn returns normalised over the whole batch")
register_estimator("hgpo", turn_advantages=_T + "hgpo_turns", needs_groups=True,
                   doc="HGPO: GiGPO whose step groups are also keyed by 1..hgpo_levels turns of agreeing context")
register_estimator("turn_gae", targets=_T + "turn_gae_targets", needs_critic=True,
                   doc="turn-level GAE: the critic's value at each turn's first action token, a turn clock")
register_estimator("bi_level_gae", targets=_T + "bi_level_targets", needs_critic=True,
                   doc="bi-level GAE: token GAE inside a turn (lam_token), the turn clock across turns")
