"""rollout.branching: play rollout.groups tasks x rollout.group_size as the sync collector does, then grow
branches from env snapshots of some plays (agentgym/engine/branching.py) and train on both.

  mode=all       from one play of every group
  mode=balanced  from one play of each group whose plays all succeeded or all failed: the groups with no
                 pass-rate signal; their branches (G continuations from one of their states) are groups whose
                 pass rate can differ from 0 and 1
Where in that play: fixed turns, shares of its length, or a rule (BRANCH_RULES: random, revisit, late). A branch
point's `branches` continuations form a group whose branch turn is an exact GiGPO step group; the branches'
copies of the play's turns before it are trained once, in the play (`TurnTable.shared`).

With train.mode=async each rollout worker grows its chunk's branches right after playing it, with the weights
it played with (`Brancher`, used by train/collectors/async_collector.py), and the queue hands the trainer a
task's plays and their branches as one unit.

Refused at config load, with the reason and the fix: train.distributed, rollout.lookahead, the process and ray
executors (snapshots restore into in-process envs), the fold layout, dynamic sampling, group rewards, ArCHer,
and an env class that declares no snapshots. Before the first rollout the env is built once and must replay the
run's reset options (the policy's tool-call format, the split) through a snapshot into a fresh env
(`check_replayable`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from agentgym.errors import ConfigError
from agentgym.train.collectors.base import (Collected, Collector, CollectorContext, refuse_unless, scored_usable,
                                            turn_cap, usable)
from agentgym.trajectory import Trajectory, split_groups

MODES = ("off", "all", "balanced")


@dataclass(frozen=True)
class BranchingSection:
    mode: Literal["off", "all", "balanced"] = "off"
    """off; all: branch from one play of every group; balanced: only from groups whose plays all succeeded or
    all failed (train/collectors/branching.py, docs/guide/branching.md)."""
    turns: tuple[int, ...] = ()
    """Branch from the state a play acted from at these turns (0: after reset). One of turns, shares, rule."""
    shares: tuple[float, ...] = ()
    """Or at these shares of the play's length, each in [0, 1) (turn floor(share x turns))."""
    rule: str = ""
    """Or at the turns a rule picks, `points` per play: random, revisit (turns that brought back a visited
    state first), late (the last turns)."""
    points: int = 1
    """With rule: branch points per play."""
    branches: int = 4
    """Continuations per branch point (the size of its exact step group)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"rollout.branching.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode != "off":
            self.where()  # exactly one of turns, shares, rule; each valid

    def where(self) -> Any:
        """The engine's BranchConfig (where and how wide), validated."""
        from agentgym.engine.branching import BranchConfig

        try:
            return BranchConfig(turns=tuple(self.turns), G=self.branches, shares=tuple(self.shares), rule=self.rule,
                                points=self.points)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("branch.G", "branch.branches").replace("branch.", "rollout.branching.")
                              + " (or set rollout.branching.mode=off)") from None


class Brancher:
    """Grows rollout.branching's branches from played groups: the sync collector's batch, or one async rollout
    worker's chunk (train/collectors/async_collector.py) with the weights that worker plays with. Built once:
    the env must replay the run's reset options through a snapshot first (`check_replayable`)."""

    def __init__(self, ctx: CollectorContext):
        self.ctx, self.cfg = ctx, ctx.config
        self.section = self.cfg.rollout.branching
        self.where = self.section.where()
        check_replayable(self.cfg.rollout, self.options(ctx.chat, "train"))

    @staticmethod
    def options(chat: Any, split: str) -> dict[str, Any]:
        """The reset options a training play has (as `rollout` sets them): the policy's tool-call format, the split."""
        return {"tool_format": getattr(chat, "tool_format", "hermes"), "split": split}

    def grow(self, kept: list[Trajectory], policy: Any, config: Any, seeds: list[int]) -> list[Trajectory]:
        """Branches from one play of each chosen group of `kept` (every group, or the flat ones), played by
        `policy`; the groups of `seeds` (their first seed keys where a rule branches), numbered after the last."""
        from agentgym.engine.branching import grow_branches

        r, b = self.cfg.rollout, self.section
        groups = split_groups(kept)
        chosen = groups if b.mode == "all" else flat_groups(groups)
        rng = random.Random(self.cfg.train.seed * 1_000_003 + seeds[0])
        wanted = [(g[0], k) for g in chosen for k in self.where.turns_of(g[0], rng)]
        return grow_branches(self.ctx.env_id, policy, self.ctx.chat, wanted, b.branches, config,
                             dict(r.env_kwargs) or None, seeds[-1] + 1, self.options(self.ctx.chat, "train"))

    def batch(self, played: list[Trajectory], grown: list[Trajectory]) -> Collected:
        """The plays and their branches as one training batch. batch: the kept plays and branches; first: the
        plays as played (the run's success figures are theirs); stats: drops, reward sanity and the branches'
        own figures (branch/...)."""
        r = self.cfg.rollout
        stats = self.ctx.sanity(played)
        kept, first, failed, mixed = scored_usable(self.ctx, played, r.group_size)
        branches, _, b_failed, b_mixed = scored_usable(self.ctx, grown, self.section.branches)
        stats.update({k: v + b_failed.get(k, 0.0) for k, v in failed.items()})
        stats["groups_not_one_task"] = float(mixed + b_mixed)
        points = len({t.group_id for t in grown})
        return Collected(kept + branches, first,
                         {**stats, **branch_figures(played, grown, flat_groups(split_groups(kept)), points)})


class BranchingCollector(Collector):
    name = "branching"

    def __init__(self, ctx: CollectorContext, state: dict[str, Any]):
        super().__init__(ctx, state)
        self.brancher = Brancher(ctx)

    def collect(self, iteration: int) -> Collected:
        """rollout.groups tasks x rollout.group_size plays, then their branches (`Brancher.batch` says what of
        them trains)."""
        ctx, r = self.ctx, self.cfg.rollout
        config = ctx.rollout_config(turn_cap(self.cfg, iteration), r.temperature, self.cfg.train.seed)
        seeds = list(range(self.next_seed, self.next_seed + r.groups))
        self.next_seed += r.groups
        played = ctx.play(seeds, r.group_size, config, "train")
        kept, _, _ = usable(played, r.group_size)
        return self.brancher.batch(played, self.brancher.grow(kept, ctx.policy(), config, seeds))


def flat_groups(groups: list[list[Trajectory]]) -> list[list[Trajectory]]:
    """The groups whose plays all succeeded or all failed: no pass-rate signal."""
    return [g for g in groups if len({t.success for t in g}) == 1]


def branch_figures(played: list[Trajectory], grown: list[Trajectory], flat: list[list[Trajectory]],
                   points: int) -> dict[str, float]:
    """What branching played: its points, episodes and new turns (a branch plays only its turns after the
    point), the branches' success, how many of their groups have a pass rate strictly between 0 and 1, and
    how many of the plays' groups were flat (all succeeded or all failed)."""
    groups = split_groups([t for t in grown if t.outcome != "error"])
    informative = sum(0 < sum(t.success for t in g) < len(g) for g in groups)
    new_turns = sum(len(t.turns) - t.shared_prefix for t in grown)
    return {"branch/points": float(points), "branch/episodes": float(len(grown)),
            "branch/turns_played": float(new_turns),
            "branch/success": sum(t.success for t in grown) / len(grown) if grown else 0.0,
            "branch/informative_groups": float(informative), "branch/flat_groups": float(len(flat)),
            "episodes_played": float(len(played) + len(grown)),
            "turns_played": float(sum(len(t.turns) for t in played) + new_turns)}


def check_branching(cfg: Any) -> None:
    """What rollout.branching cannot run with, each refused with its reason and fix (at config load)."""
    r, t, a = cfg.rollout, cfg.train, cfg.algorithm
    fix = "or set rollout.branching.mode=off"
    refuse_unless(t.distributed == "none", f"rollout.branching plays in one process: set train.distributed=none, {fix}")
    refuse_unless(not r.lookahead, f"rollout.lookahead and rollout.branching both grow plays from snapshots: choose "
                                   f"one (rollout.lookahead=0, {fix})")
    refuse_unless(r.executor in ("serial", "thread") and r.layout != "fold",
                  "rollout.branching restores env snapshots in-process and replays trajectory or step prompts: set "
                  f"rollout.executor=serial or thread and rollout.layout=trajectory or step, {fix}")
    refuse_unless(not a.dynamic_sampling, "rollout.branching=balanced is the answer to groups without signal here; "
                                          f"dynamic sampling would refill them as well: set algorithm.dynamic_sampling="
                                          f"false, {fix}")
    refuse_unless(not r.group_rewards, f"rollout.branching's branch groups share a state, not a task's start: set "
                                       f"rollout.group_rewards=[], {fix}")
    refuse_unless(a.estimator != "archer", "ArCHer's replay buffer would hold a branch's copied turns again: use a "
                                           f"group estimator (gigpo, grpo, rloo, hgpo) or a GAE one, {fix}")
    declared = declares_snapshots(r.env)
    refuse_unless(declared is not False, f"rollout.branching restores env snapshots, and {r.env} declares none (no "
                                         "TextEnv.snapshot_fields and no snapshot()/restore()): list the env's state in "
                                         f"snapshot_fields, {fix}")


def declares_snapshots(env_id: str) -> bool | None:
    """Whether `env_id`'s class snapshots, read from the class (nothing is built); None when it cannot tell
    (an unknown id, a module that cannot load here, a remote env: asked of the built env before the first play)."""
    from gymnasium.envs.registration import load_env_creator

    from agentgym.core import TextEnv
    from agentgym.errors import RegistrationError
    from agentgym.registration import spec

    try:
        entry = spec(env_id).entry_point
        creator: Any = entry if callable(entry) else load_env_creator(str(entry))
    except (RegistrationError, ImportError, AttributeError):
        return None
    if not isinstance(creator, type) or not issubclass(creator, TextEnv) \
            or creator.supports_snapshot is not TextEnv.supports_snapshot:  # the instance decides (a remote env)
        return None
    return bool(creator.snapshot_fields) or creator.snapshot is not TextEnv.snapshot


def check_replayable(r: Any, options: dict[str, Any]) -> None:
    """The env, built once, must snapshot and replay the run's reset `options` (the policy's tool-call format,
    the split) in a fresh instance: a few steps from reset(seed, options), a snapshot, more steps, then the
    same steps again from that snapshot in the same env and in one reset without options. Refused with the
    fix otherwise (a ConfigError before the first play)."""
    from agentgym.engine.vector import build_env
    from agentgym.errors import CheckError
    from agentgym.snapshot import check_snapshot, supports_snapshot

    kwargs = dict(r.env_kwargs) or None
    env = build_env(r.env, kwargs, r.max_turns)
    fix = "or set rollout.branching.mode=off"
    try:
        if not supports_snapshot(env):
            raise ConfigError(f"rollout.branching restores env snapshots, and {r.env} has no snapshot()/restore(): "
                              f"list the env's state in TextEnv.snapshot_fields, {fix}")
        try:
            check_snapshot(env, r.seed_start, lambda e, info: _probe_action(e, info, options), prefix=1, horizon=2,
                           factory=lambda: build_env(r.env, kwargs, r.max_turns), options=options)
        except CheckError as exc:
            raise ConfigError(f"rollout.branching replays plays reset with {options}, and {r.env} does not restore "
                              f"them: {exc}; snapshot what reset chose (TextEnv.snapshot_fields), {fix}") from None
    finally:
        env.close()


def _probe_action(env: Any, info: dict[str, Any], options: dict[str, Any]) -> str:
    """An action that exercises what reset chose: an admissible one, else a tool call in the run's format."""
    from agentgym.toolcall_formats import FORMATS, ToolCall

    admissible = info.get("admissible_actions")
    if admissible:
        return str(list(admissible)[0])
    tools = getattr(env.unwrapped, "tools", None)
    fmt = FORMATS.get(options.get("tool_format", "hermes"))
    if tools and fmt is not None:
        return fmt.render_calls([ToolCall(tools[0].name, {})])
    return "look"
