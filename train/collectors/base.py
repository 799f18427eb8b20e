"""What every collector shares: the batch it hands the learner (`Collected`), the config sections it reads
(`PlaySections`), the trainer's parts it plays with (`CollectorContext`), the `Collector` base class, and the
pure filters of a played batch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from agentgym.errors import ConfigError
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.rubric import apply_group_rewards
from agentgym.train.guardrails import drop_mixed_groups
from agentgym.train.health import reward_sanity
from agentgym.trajectory import Trajectory, TurnTable, split_groups


@dataclass
class Collected:
    """One iteration's rollouts: `batch` trains, `first` (the first round, before drops) is logged."""

    batch: list[Trajectory]
    first: list[Trajectory]
    stats: dict[str, float]
    decisions: list[Any] | None = None   # lookahead: the looked-ahead turns the learner trains
    fresh_version: int | None = None     # async: turns of this policy version are the current weights'


@dataclass(frozen=True)
class PlaySections:
    """What of the training config a collector reads, and nothing else of it: `rollout` (env, groups, sampling,
    seeds, lookahead), `train` (the seed, the async options) and `algorithm` (dynamic sampling, the turn-cap
    schedule, HGPO's history depth). A collector reads them as `self.cfg.rollout`, ... as it would the config."""

    rollout: Any
    train: Any
    algorithm: Any
    selfplay: Any = None  # the selfplay collector's section (train/selfplay/config.py)
    gateway: Any = None   # the gateway collector's section, where the config has one

    @classmethod
    def of(cls, config: Any) -> PlaySections:
        return cls(config.rollout, config.train, config.algorithm, getattr(config, "selfplay", None),
                   getattr(config, "gateway", None))


@dataclass
class CollectorContext:
    """The trainer's parts a collector plays with, and its sections. `policy()` is read at each call (a
    benchmark may wrap the trainer's policy between iterations); `make_rollout_policy()` builds a second copy
    that generates while the trainer updates (async with an HF policy)."""

    config: PlaySections
    env_id: str
    chat: Any
    policy: Callable[[], Any]
    reward_range: tuple[float, float] | None
    group_rewards: Any
    iteration: int
    dist: Any = None
    is_main: bool = True
    make_rollout_policy: Callable[[], Any] | None = None

    def rollout_config(self, max_turns: int | None, temperature: float, seed: int | None) -> RolloutConfig:
        cfg = self.config
        return cfg.rollout.engine_config(temperature=temperature, stop=getattr(self.chat, "stop_strings", ()),
                                         seed=seed, max_turns=max_turns,
                                         history_key_depth=max(cfg.rollout.history_key_depth, cfg.algorithm.hgpo.levels))

    def play(self, seeds: list[int], group_size: int, config: RolloutConfig, split: str,
             policy: Any = None) -> list[Trajectory]:
        return rollout(self.env_id, self.policy() if policy is None else policy, self.chat, seeds, group_size,
                       config, env_kwargs=dict(self.config.rollout.env_kwargs) or None, start_group_id=seeds[0],
                       reset_options={"split": split})

    def with_group_rewards(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        return apply_group_rewards(trajectories, self.group_rewards) if self.group_rewards else trajectories

    def sanity(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """The env's own rewards checked against its declaration (before group rewards)."""
        return reward_sanity(trajectories, self.reward_range)


class Collector:
    """Plays an iteration's batch. Subclasses set `name` and implement `collect`."""

    name = ""

    def __init__(self, ctx: CollectorContext, state: dict[str, Any]):
        self.ctx, self.cfg = ctx, ctx.config
        self.next_seed = int(state.get("next_seed", self.cfg.rollout.seed_start))

    def collect(self, iteration: int) -> Collected:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of this collector (the trainer merges it into trainer.pt's state)."""
        return {"next_seed": self.next_seed}

    def eval_policy(self) -> Any:
        """The policy in-training evals generate with (None: the trainer's)."""
        return None

    def take_weights(self, model: Any, version: int) -> bool:
        """Receive the trained weights as `version` itself (True), or leave the push to the trainer (False)."""
        return False

    def advance(self, iteration: int) -> None:
        """The trainer finished `iteration` updates."""

    def close(self) -> None:
        """Stop what the collector started."""


def refuse_unless(ok: bool, message: str) -> None:
    """A config check of a collector's options: a ConfigError whose message says how to fix it."""
    if not ok:
        raise ConfigError(message)


def turn_cap(config: Any, iteration: int) -> int | None:
    """The turn limit of an iteration: the last schedule entry at or before it, else rollout.max_turns."""
    cap = config.rollout.max_turns
    for start, limit in config.algorithm.turn_cap_schedule:
        if iteration >= start:
            cap = int(limit)
    return cap


def keep_varied_groups(trajectories: Sequence[Trajectory], algorithm: Any = None
                       ) -> tuple[list[list[Trajectory]], int]:
    """Groups (in order) with something to learn from, and how many were dropped: returns not all equal, or
    with `algorithm.dynamic_sampling_keep=advantages`, some turn with a non-zero advantage under its estimator."""
    groups = split_groups(trajectories)
    if algorithm is not None and algorithm.dynamic_sampling_keep == "advantages":
        from agentgym.train.estimators.targets import turn_advantages

        kept = [g for g in groups
                if np.any(np.abs(turn_advantages(algorithm, TurnTable.from_trajectories(g), g)) > 1e-9)]
    else:
        kept = [g for g in groups if len({round(t.total_reward, 9) for t in g}) > 1]
    return kept, len(groups) - len(kept)


def drop_failed(trajectories: Sequence[Trajectory], min_group: int) -> tuple[list[Trajectory], dict[str, float]]:
    """Trajectories minus failed episodes (env exception, timeout, policy error: not the agent's doing, so
    no signal to learn from) and minus groups left with fewer than `min_group` members."""
    ok = [t for t in trajectories if t.outcome != "error"]
    sizes: dict[int, int] = {t.group_id: 0 for t in trajectories if t.outcome == "error"}  # a group all failed: 0
    for t in ok:
        sizes[t.group_id] = sizes.get(t.group_id, 0) + 1
    kept = [t for t in ok if sizes[t.group_id] >= min_group]
    return kept, {"failed_dropped": float(len(trajectories) - len(ok)),
                  "groups_dropped_after_failures": float(sum(n < min_group for n in sizes.values()))}


def scored_usable(ctx: CollectorContext, played: list[Trajectory], group_size: int
                  ) -> tuple[list[Trajectory], list[Trajectory], dict[str, float], int]:
    """`usable`'s episodes with the group rewards scored among them only, so an episode an infrastructure
    failure ended neither trains nor moves its group mates' rewards: (kept, the played round for the logs,
    the failure counts, how many groups were not one task)."""
    kept, failed, mixed = usable(played, group_size)
    kept = ctx.with_group_rewards(kept)
    scored = {(t.group_id, t.sample_index): t for t in kept}
    return kept, [scored.get((t.group_id, t.sample_index), t) for t in played], failed, mixed


def usable(trajectories: list[Trajectory], group_size: int) -> tuple[list[Trajectory], dict[str, float], int]:
    """A played round minus failed episodes, groups left too small and groups that are not one task:
    (kept, the failure counts, how many groups were not one task)."""
    kept, failed = drop_failed(trajectories, min(2, group_size))
    kept, mixed = drop_mixed_groups(kept)  # a group must be G plays of one task
    return kept, failed, mixed

