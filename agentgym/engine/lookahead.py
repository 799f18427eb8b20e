"""One-step lookahead on the greedy policy, for agents that act among the env's admissible actions.

Greedy evaluation fails a task through a few of its decisions, and a sampled group of the same task mostly
replays them (a policy that picks its greedy action on 95% of turns rarely tries anything else where it
matters). Here each task of an iteration is played once greedily (the trunk: what evaluation does). From up to
`points` turns of each failed trunk (first the turns whose action brought back a state the episode had been in,
the loops a small model falls into; then other turns, drawn at random; with `success_points`, random turns of
successful trunks too, so the update also sees the choices that worked) the env is restored to that turn's state
and the `alternatives` actions the policy ranked next are each tried there, every one followed greedily to the
end of the episode. A turn's play-outs form a group (a `Decision`): the greedy action, whose play-out is the
trunk's own rest, and the alternatives. With a deterministic env each return is exactly what the current greedy
policy gets after that action, so comparing them carries no sampling noise (VinePPO's Monte-Carlo values, one
deterministic play-out each); the trainer moves each decision's choice toward the actions that returned more
(train/updaters/lookahead.py `lookahead_step`).

    batch = lookahead_rollout("agentgym/Household-PickPlace-v0", policy, None, seeds=[0, 1, 2, 3],
                              alternatives=3, points=2, config=greedy_config, rng=random.Random(0))

Needs an admissible-action policy that keeps its candidates' scores (`Choice.scores`), an env with snapshots
(`TextEnv.snapshot_fields`) and an in-process pool (executor serial or thread).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from agentgym.engine.branching import _continue, replayed_points
from agentgym.chat import ChatFormat
from agentgym.errors import ConfigError
from agentgym.policy import Choice, Policy
from agentgym.revisits import REVISIT
from agentgym.engine.rollout import RolloutConfig, _Engine, _resolve_chat, _run_sync, rollout
from agentgym.snapshot import restore
from agentgym.trajectory import Trajectory
from agentgym.engine.vector import make_pool


@dataclass(frozen=True)
class Decision:
    """One turn of a greedy trunk and its play-outs: `picks[m]` is the candidate index tried (the greedy pick
    first) and `plays[m]` the whole trajectory that tried it (the trunk itself first), all equal up to `turn`."""

    trunk: Trajectory
    turn: int
    picks: tuple[int, ...]
    plays: tuple[Trajectory, ...]


@dataclass(frozen=True)
class LookaheadBatch:
    trunks: list[Trajectory]
    decisions: list[Decision]

    @property
    def branches(self) -> list[Trajectory]:
        return [p for d in self.decisions for p in d.plays[1:]]


def branch_turns(trunk: Trajectory, points: int, rng: random.Random, success_points: int = 0) -> list[int]:
    """Where to look ahead in `trunk`, among the turns that chose among two or more actions: none if it failed
    to run; `success_points` turns drawn at random if it succeeded (their play-outs test the choices that worked,
    so the update also learns what to keep doing); else up to `points` turns, first those whose action brought
    back a visited state (reward component `revisit` below 0), in order, then turns drawn at random."""
    if trunk.end_reason == "failed":
        return []
    open_turns = [t.index for t in trunk.turns if t.choice is not None and len(t.choice.candidates) > 1]
    if trunk.success:
        return sorted(rng.sample(open_turns, min(success_points, len(open_turns))))
    loops = [i for i in open_turns if trunk.turns[i].reward_components.get(REVISIT, 0.0) < 0]
    chosen = loops[:points]
    rest = [i for i in open_turns if i not in chosen]
    chosen += rng.sample(rest, min(points - len(chosen), len(rest)))
    return sorted(chosen)


def ranked_alternatives(choice: Choice, k: int) -> list[int]:
    """The `k` candidates the policy scored highest after its pick (ties: the earlier candidate first)."""
    if choice.scores is None:
        raise ConfigError("lookahead ranks the candidates by the policy's scores, and this turn's Choice kept none: "
                          "use the admissible policy (policies/admissible.py), which keeps them")
    order = sorted(range(len(choice.candidates)), key=lambda i: (-choice.scores[i], i))  # type: ignore[index]
    return [i for i in order if i != choice.pick][:k]


def lookahead_rollout(env: str | Callable[[], Any], policy: Policy, chat: ChatFormat | None, seeds: Sequence[int],
                      *, alternatives: int, points: int, config: RolloutConfig, rng: random.Random,
                      success_points: int = 0,
                      env_kwargs: dict[str, Any] | None = None, start_group_id: int = 0,
                      reset_options: dict[str, Any] | None = None) -> LookaheadBatch:
    """The greedy trunks (one per seed, group ids from `start_group_id`) and every looked-ahead turn's play-outs.
    `config` should sample greedily (temperature 0): the trunks and the play-outs after each tried action are
    the greedy policy's."""
    if alternatives < 1 or points < 1:
        raise ConfigError(f"lookahead needs alternatives >= 1 and points >= 1, got {alternatives} and {points}")
    if config.executor not in ("serial", "thread"):
        raise ConfigError("lookahead restores snapshots into in-process envs; set rollout.executor to serial or "
                          f"thread, not {config.executor!r}")
    chat = _resolve_chat(policy, chat)
    options = {"tool_format": getattr(chat, "tool_format", "hermes"), **(reset_options or {})}
    trunks = rollout(env, policy, chat, seeds, 1, config, env_kwargs, start_group_id, reset_options=options)
    wanted = [(trunk, k) for trunk in trunks for k in branch_turns(trunk, points, rng, success_points)]
    if not wanted:
        return LookaheadBatch(trunks, [])
    tries = []  # (point, greedy pick, alternative picks)
    for point in replayed_points(env, env_kwargs, config, wanted, "lookahead needs", options):
        choice = point.trunk.turns[point.turn].choice
        assert choice is not None  # branch_turns keeps turns with a choice
        if len(point.info.get("admissible_actions") or ()) < len(choice.candidates):
            raise ConfigError(f"replaying {point.trunk.env_id} seed {point.trunk.seed} to turn {point.turn} offered "
                              f"fewer actions than the {len(choice.candidates)} the trunk chose among")
        tries.append((point, choice.pick, ranked_alternatives(choice, alternatives)))
    n = sum(len(alts) for _, _, alts in tries)
    pool = make_pool(env, n, config.executor, config.env_workers, env_kwargs, config.max_turns, config.env_timeout_s)
    try:
        engine = _Engine(pool, policy, chat, config)
        episodes, slot = [], 0
        for p, (point, _, alts) in enumerate(tries):
            for m, alt in enumerate(alts):
                restore(pool.handle(slot), point.data)
                ep = _continue(engine, pool.handle(slot), point, slot, start_group_id + len(seeds) + p, m + 1)
                # the first action of the play-out is the alternative: the only one the policy is offered
                ep.info = {**point.info, "admissible_actions": [point.info["admissible_actions"][alt]]}
                episodes.append(ep)
                slot += 1
        _run_sync(engine, episodes, lambda ep: None)
        # the trunk's turns before the branch point are copies: marked, so they are trained and counted once
        plays = iter([replace(ep.to_trajectory(), shared_prefix=point.turn)
                      for ep, point in zip(episodes, [p for p, _, alts in tries for _ in alts])])
    finally:
        pool.close()
    decisions = []
    for point, greedy, alts in tries:
        branch = [next(plays) for _ in alts]
        decisions.append(Decision(point.trunk, point.turn, (greedy, *alts), (point.trunk, *branch)))
    return LookaheadBatch(trunks, decisions)
