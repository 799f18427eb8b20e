"""Branch rollouts: from chosen turns of an episode, fork G continuations from the very same env state.

    trajs = branch_rollout("agentgym/Household-v0", policy, None, seeds=[0, 1], branch=BranchConfig(turns=(2,), G=4))

First one trunk episode per seed is played (an ordinary rollout). Then for each trunk and each branch turn k
it reached, a fresh env is reset with the trunk's seed and replays the trunk's first k actions (envs are
deterministic: `check_env` holds them to it), is snapshotted, and the snapshot is restored into G envs that
play on from turn k with the same policy, in one batched rollout. Each branch is a whole `Trajectory`: its
first k turns are the trunk's turns, copied (the same prompts, tokens and rewards, so token-in-token-out and
returns stay whole), and `shared_prefix = k` marks them; `TurnTable.shared` marks those rows, so an
estimator trains and counts the shared prefix once (in the trunk) and never drops it. The G branches of a
point form their own group (a fresh group id): their turn k acted from one restored state, so it is an exact
GiGPO step group of size G, not one found by chance.

Where to branch (`BranchConfig`): fixed turns, shares of each trunk's length, or a rule of `BRANCH_RULES`
(random turns, the turns that looped back to a visited state, the last turns). `grow_branches` grows the
branches of trunks played elsewhere (the trainer's collector, train/collectors/branching.py, plays ordinary
groups and branches from some of their members).

Each trunk is a group of its own in `branch_rollout` (a trunk mixed into its branches' group would need returns
over whole trajectories but statistics over trained rows only: the estimator seam this leaves to the trainer),
so its turns before the first branch point carry no group-relative signal; train on branches alongside
ordinary groups when those turns should learn too.

Two checks that the restored state is the recorded one, each stopping the run with the env id, seed and turn
(`CheckError`): the replay to turn k must reach the anchor the trunk recorded there, and a branch whose first
action is the trunk's own must get the trunk's answer (observation, reward, end) from its restored env.

Needs an env with snapshots (`TextEnv.snapshot_fields`) and an in-process pool (executor serial or thread).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from agentgym.chat import ChatFormat
from agentgym.errors import CheckError, ConfigError
from agentgym.policy import Policy
from agentgym.revisits import REVISIT
from agentgym.engine.rollout import RolloutConfig, _Engine, _Episode, _resolve_chat, _run_sync, rollout
from agentgym.snapshot import restore, snapshot, supports_snapshot
from agentgym.trajectory import Trajectory, TurnTable
from agentgym.engine.vector import build_env, env_turn_limit, make_pool


def _random_turns(trunk: Trajectory, rng: random.Random, points: int) -> list[int]:
    return sorted(rng.sample(range(len(trunk.turns)), min(points, len(trunk.turns))))


def _revisit_turns(trunk: Trajectory, rng: random.Random, points: int) -> list[int]:
    """The turns whose action brought back a state the episode had been in (reward component `revisit` < 0),
    in order: the loops a small model falls into; then turns drawn at random."""
    loops = [t.index for t in trunk.turns if t.reward_components.get(REVISIT, 0.0) < 0][:points]
    rest = [t.index for t in trunk.turns if t.index not in loops]
    return sorted(loops + rng.sample(rest, min(points - len(loops), len(rest))))


def _late_turns(trunk: Trajectory, rng: random.Random, points: int) -> list[int]:
    """The last turns: states independent episodes of a task almost never share."""
    return list(range(max(0, len(trunk.turns) - points), len(trunk.turns)))


BRANCH_RULES: dict[str, Callable[[Trajectory, random.Random, int], list[int]]] = {
    "random": _random_turns, "revisit": _revisit_turns, "late": _late_turns}
"""rule name -> (trunk, rng, points) -> the turns of the trunk to branch from (at most `points`, sorted)."""


@dataclass(frozen=True)
class BranchConfig:
    """Where to branch and how wide: exactly one of `turns`, `shares` and `rule`. Validated at construction."""

    turns: tuple[int, ...] = ()     # branch from the state each trunk acted from at these turns (0 = after reset)
    G: int = 4                      # continuations per branch point
    shares: tuple[float, ...] = ()  # or at these shares of each trunk's length (turn floor(share x turns))
    rule: str = ""                  # or at the turns a rule of BRANCH_RULES picks, `points` per trunk
    points: int = 1

    def __post_init__(self) -> None:
        if sum(bool(x) for x in (self.turns, self.shares, self.rule)) != 1:
            raise ConfigError("where to branch: give exactly one of branch.turns (turn indices), branch.shares (of "
                              f"each trunk's length) and branch.rule ({', '.join(BRANCH_RULES)}); got "
                              f"turns={self.turns!r}, shares={self.shares!r}, rule={self.rule!r}")
        if any(k < 0 for k in self.turns):
            raise ConfigError(f"branch.turns must be turn indices >= 0, got {self.turns!r}")
        if any(not 0 <= s < 1 for s in self.shares):
            raise ConfigError(f"branch.shares must be shares of a trunk's turns in [0, 1), got {self.shares!r}")
        if self.rule and self.rule not in BRANCH_RULES:
            raise ConfigError(f"branch.rule must be one of {', '.join(BRANCH_RULES)}, got {self.rule!r}")
        if self.G < 1 or self.points < 1:
            raise ConfigError(f"branch.G and branch.points must be >= 1, got {self.G} and {self.points}")

    def turns_of(self, trunk: Trajectory, rng: random.Random) -> list[int]:
        """The turns of `trunk` to branch from (none if it failed to run), sorted, each < its length."""
        n = len(trunk.turns)
        if trunk.end_reason == "failed" or n == 0:
            return []
        if self.rule:
            return BRANCH_RULES[self.rule](trunk, rng, self.points)
        wanted = self.turns or tuple(int(s * n) for s in self.shares)
        return sorted({k for k in wanted if k < n})


@dataclass(frozen=True)
class _Point:
    trunk: Trajectory
    turn: int
    data: bytes
    info: dict[str, Any]
    tools: tuple[dict[str, Any], ...]


def branch_rollout(env: str | Callable[[], Any], policy: Policy, chat: ChatFormat | None, seeds: Sequence[int],
                   branch: BranchConfig | None = None, config: RolloutConfig | None = None,
                   env_kwargs: dict[str, Any] | None = None, start_group_id: int = 0,
                   reset_options: dict[str, Any] | None = None, rng: random.Random | None = None
                   ) -> list[Trajectory]:
    """The trunks (group ids from `start_group_id`, one per seed), then every branch point's G branches
    (a group each, after the trunks' groups), in that order. The trunks are reset as `rollout` resets them
    (`tool_format` = the chat format's unless `reset_options` names one) and replayed with the same options,
    so a tool env reads the policy's calls in the replay as it did in the trunk. `rng` draws a rule's turns."""
    branch, config = branch or BranchConfig(turns=(1,)), config or RolloutConfig()
    check_branchable(config)
    chat = _resolve_chat(policy, chat)
    options = {"tool_format": getattr(chat, "tool_format", "hermes"), **(reset_options or {})}
    trunks = rollout(env, policy, chat, seeds, 1, config, env_kwargs, start_group_id, reset_options=options)
    rng = rng or random.Random(0)
    wanted = [(trunk, k) for trunk in trunks for k in branch.turns_of(trunk, rng)]
    return trunks + grow_branches(env, policy, chat, wanted, branch.G, config, env_kwargs,
                                  start_group_id + len(seeds), options)


def check_branchable(config: RolloutConfig) -> None:
    """What a branch rollout cannot run with, refused with its fix."""
    if config.executor not in ("serial", "thread"):
        raise ConfigError(f"branch rollouts restore snapshots into in-process envs; set rollout.executor to serial "
                          f"or thread, not {config.executor!r}")
    if config.layout == "fold":
        raise ConfigError("branch rollouts replay trajectory or step layouts; set rollout.layout to one of those, "
                          "not fold")


def grow_branches(env: str | Callable[[], Any], policy: Policy, chat: ChatFormat | None,
                  wanted: Sequence[tuple[Trajectory, int]], G: int, config: RolloutConfig,
                  env_kwargs: dict[str, Any] | None = None, start_group_id: int = 0,
                  reset_options: dict[str, Any] | None = None) -> list[Trajectory]:
    """G branches from each (trunk, turn k) of `wanted`: the trunk's state at turn k (replayed from its reset,
    `reset_options` as its rollout had them) restored into G envs that play on. Point p's branches are group
    `start_group_id + p`, in that order; each copies the trunk's first k turns (`shared_prefix = k`) and names
    the trunk's group (`trunk_group`)."""
    if not wanted:
        return []
    check_branchable(config)
    chat = _resolve_chat(policy, chat)
    options = {"tool_format": getattr(chat, "tool_format", "hermes"), **(reset_options or {})}
    points = replayed_points(env, env_kwargs, config, wanted, "branch rollouts need", options)
    pool = make_pool(env, len(points) * G, config.executor, config.env_workers, env_kwargs, config.max_turns,
                     config.env_timeout_s)
    try:
        engine = _Engine(pool, policy, chat, config)
        episodes = []
        for p, point in enumerate(points):
            for g in range(G):
                slot = p * G + g
                restore(pool.handle(slot), point.data)
                episodes.append(_continue(engine, pool.handle(slot), point, slot, start_group_id + p, g))
        _run_sync(engine, episodes, lambda ep: None)
        branches = [replace(ep.to_trajectory(), shared_prefix=point.turn, trunk_group=point.trunk.group_id)
                    for ep, point in zip(episodes, [pt for pt in points for _ in range(G)])]
    finally:
        pool.close()
    for b, point in zip(branches, [pt for pt in points for _ in range(G)]):
        check_restored(point.trunk, b, point.turn)
    return branches


def check_restored(trunk: Trajectory, branch: Trajectory, k: int) -> None:
    """A branch whose turn k sent the trunk's own action must have got the trunk's answer from its restored env
    (a deterministic env in the recorded state gives the same): else the restore reached another state, and the
    run stops here, naming the env, seed and turn."""
    if branch.outcome == "error" or trunk.outcome == "error" or len(branch.turns) <= k \
            or branch.turns[k].action != trunk.turns[k].action:
        return
    mine, theirs = branch.turns[k], trunk.turns[k]
    after = [(t.turns[k + 1].observation if len(t.turns) > k + 1 else t.final_observation) for t in (branch, trunk)]
    seen = {"observation": tuple(after), "reward": (mine.reward, theirs.reward), "valid": (mine.valid, theirs.valid),
            "terminated": (mine.terminated, theirs.terminated)}
    for name, (a, b) in seen.items():
        if a != b:
            raise CheckError(f"env {trunk.env_id} seed {trunk.seed}: the state restored at turn {k} answered the "
                             f"trunk's own action {theirs.action[:60]!r} with another {name} ({str(a)[:80]!r} vs "
                             f"{str(b)[:80]!r}): the restore reached another state than recorded; the env's snapshot "
                             "misses state that step() reads (`agentgym check` reports it)")


def replayed_points(env: Any, env_kwargs: dict[str, Any] | None, config: RolloutConfig,
                    wanted: Sequence[tuple[Trajectory, int]], needs: str, options: dict[str, Any] | None = None
                    ) -> list[_Point]:
    """A `_Point` (snapshot and info) for each (trunk, turn k) of `wanted`: one env replays each trunk's first k
    actions after the reset its rollout had (`options`). `needs` starts the refusal for an env without snapshots."""
    replayer = build_env(env, env_kwargs, config.max_turns)
    try:
        if not supports_snapshot(replayer):
            raise ConfigError(f"{type(replayer.unwrapped).__name__} has no snapshot()/restore(); {needs} them "
                              "(list the env's state in TextEnv.snapshot_fields)")
        tools = tuple(t.schema for t in (getattr(replayer, "tools", None) or ()))
        return [_Point(trunk, k, *_replay(replayer, trunk, k, options), tools) for trunk, k in wanted]
    finally:
        replayer.close()


def _replay(env: Any, trunk: Trajectory, k: int, options: dict[str, Any] | None = None
            ) -> tuple[bytes, dict[str, Any]]:
    """The env's snapshot and info at `trunk`'s turn k: reset as the trunk was (`options`: the reset options its
    rollout used, e.g. the split), then its first k actions replayed."""
    _, info = env.reset(seed=trunk.seed, options=options)
    for turn in trunk.turns[:k]:
        _, _, _, _, info = env.step(turn.action)
    anchor = info.get("anchor")
    if anchor is not None and anchor != trunk.turns[k].anchor:
        raise CheckError(f"env {trunk.env_id} seed {trunk.seed}: replaying to turn {k} reached another state "
                         f"({str(anchor)[:80]!r} vs {str(trunk.turns[k].anchor)[:80]!r}); the env is not "
                         "deterministic under the same seed and actions (agentgym check reports it)")
    return snapshot(env), info


def _continue(engine: _Engine, env: Any, point: _Point, slot: int, group_id: int, sample: int) -> _Episode:
    """An episode that starts at the point's turn with the trunk's turns before it as its own."""
    trunk, k = point.trunk, point.turn
    ep = _Episode(slot, trunk.seed, group_id, sample)
    ep.env_id, ep.system, ep.tools = trunk.env_id, trunk.system_prompt, point.tools
    ep.limit = engine.config.max_turns or env_turn_limit(env)
    if ep.limit is None:
        raise ConfigError(f"env {trunk.env_id!r} has no turn limit; set RolloutConfig.max_turns")
    ep.task_id, ep.task, ep.ground_truth, ep.first_obs = trunk.task_id, trunk.task, trunk.ground_truth, \
        trunk.first_observation
    ep.turns = list(trunk.turns[:k])
    ep.env_turns = k  # every turn stepped the env (branching refuses the fold layout and its summary turns)
    ep.obs_texts = [t.observation for t in trunk.turns[:k + 1]]
    ep.pieces = [(list(t.response_ids), engine.chat.turn_suffix(t.response_ids, trunk.turns[j + 1].observation))
                 for j, t in enumerate(trunk.turns[:k])]
    ep.obs, ep.info = trunk.turns[k].observation, point.info
    if engine.config.layout == "trajectory":
        ep.prompt = list(trunk.turns[k].prompt_ids)
    return ep


def trained_rows(table: TurnTable) -> np.ndarray:
    """Rows an estimator trains on and counts: all but the branches' copies of their trunks' turns."""
    return np.ones(len(table), dtype=bool) if table.shared is None else ~table.shared


def step_group_sizes(table: TurnTable) -> dict[tuple[int, int], int]:
    """(group, anchor code) -> how many trained turns acted from that state: GiGPO's step groups."""
    sizes: dict[tuple[int, int], int] = {}
    keep = trained_rows(table)
    for g, a in zip(table.group[keep].tolist(), table.anchor[keep].tolist()):
        sizes[(g, a)] = sizes.get((g, a), 0) + 1
    return sizes
