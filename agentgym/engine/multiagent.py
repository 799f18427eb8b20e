"""Multi-agent episodes: an env whose turns go to seats, each seat filled by its own policy.

    matches = play_matches("agentgym/TextArena-TicTacToe-v0", [learner, load_policy("random")], None,
                           seeds=[0, 1], group_size=4, env_kwargs={"opponent": "seats"})

The env contract for seats (TextArena's `opponent="seats"` follows it):
  - `num_seats` (an attribute of the unwrapped env): how many seats there are;
  - `info["seat"]` at reset and after every step: the seat that moves next (None once the game is over); the
    observation is what that seat was told since its own last move (its own prompt never shows another
    seat's private view);
  - `info["seat_rewards"]` ({seat: reward}) on a step: what each seat earned by it (left out: the acting seat
    earned the step's reward); `info["seat_success"]` ({seat: bool}) on the step that ends the game.

Each seat keeps its own `_Episode` of the rollout engine (its own prompt, token ids, layout and turn limit), so
token in, token out holds per seat, with the seat's own policy and chat format. A seat's turn is recorded when
its next turn comes (its next observation is what the other seats' moves made of the game) or when the game
ends, with every reward paid to it in between: the game's final outcome lands on each seat's last turn. Seat s
of task group g gets `group_id = g * num_seats + s`, so estimators that compare a group's rollouts (GRPO,
GiGPO) compare the first player with first players only. `rewards="zero_sum"` pays each seat its reward minus
the other seats' mean, halved (a general-sum game made zero-sum; a zero-sum game's +1/-1 is unchanged).

A seat left unfilled, an env that does not say whose turn it is, and a seat count that does not match are
refused before any episode runs, with the fix (`check_seats`); a policy or env failure ends that match with
end_reason "failed" for every seat.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from agentgym.chat import ChatFormat
from agentgym.engine.rollout import RolloutConfig, _Engine, _Episode, _resolve_chat, generate_isolated
from agentgym.engine.vector import EnvFailure, EnvPool, ResetResult, StepResult, build_env, make_pool
from agentgym.errors import ConfigError
from agentgym.policy import Generation, GenerationRequest, Policy, load_policy
from agentgym.trajectory import Trajectory

REWARD_MODES = ("game", "zero_sum")
OUTCOMES = ("win", "draw", "loss", "cut", "error")


@dataclass(frozen=True)
class Seat:
    """A seat's filling: its policy, the chat format its prompts are laid out in (None: the policy's own) and the
    name the match records for it (default: the policy's class name)."""

    policy: Any
    chat: ChatFormat | None = None
    name: str = ""


@dataclass(frozen=True)
class Match:
    """One multi-agent episode: every seat's own trajectory (its turns, rewards and token ids), the order the seats
    moved in and the name of the policy in each seat."""

    seats: tuple[Trajectory, ...]
    order: tuple[int, ...]                # the seat of each env step, in play order
    players: tuple[str, ...]
    group_id: int                         # the task group (seats' trajectories: group_id * num_seats + seat)
    seed: int

    @property
    def returns(self) -> tuple[float, ...]:
        return tuple(t.total_reward for t in self.seats)

    @property
    def failed(self) -> bool:
        return any(t.outcome == "error" for t in self.seats)

    @property
    def finished(self) -> bool:
        """The game ended itself (not cut by a turn limit or a full context)."""
        return any(t.end_reason == "terminated" for t in self.seats)

    def outcome(self, seat: int) -> str:
        """win / draw / loss for `seat` by its return against the best other seat's; "error" when the match
        failed, "cut" when a turn limit or a full context stopped the game before it ended."""
        if self.failed:
            return "error"
        if not self.finished:
            return "cut"
        mine = self.returns[seat]
        best_other = max(r for s, r in enumerate(self.returns) if s != seat)
        return "win" if mine > best_other else "loss" if mine < best_other else "draw"

    def to_dict(self) -> dict[str, Any]:
        return {"seats": [t.to_dict() for t in self.seats], "order": list(self.order), "players": list(self.players),
                "group_id": self.group_id, "seed": self.seed}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Match:
        return cls(tuple(Trajectory.from_dict(t) for t in d["seats"]), tuple(d["order"]), tuple(d["players"]),
                   int(d["group_id"]), int(d["seed"]))


def zero_sum(rewards: dict[int, float], num_seats: int) -> dict[int, float]:
    """Each seat's reward minus the other seats' mean, halved: sums to 0 over the seats, +1/-1 stays +1/-1."""
    if not rewards:
        return {}
    full = [float(rewards.get(s, 0.0)) for s in range(num_seats)]
    total = sum(full)
    return {s: (r - (total - r) / (num_seats - 1)) / 2 for s, r in enumerate(full)}


def seat_count(env: Any, env_kwargs: dict[str, Any] | None = None) -> int:
    """The env's `num_seats`, read from one env made here (before any episode); refused with the fix when the env
    does not say who moves."""
    made = build_env(env, env_kwargs) if not isinstance(env, EnvPool) else None
    try:
        target = getattr(made, "unwrapped", made) if made is not None else None
        seats = getattr(target, "num_seats", None) if made is not None else getattr(env, "num_seats", None)
    finally:
        if made is not None and callable(getattr(made, "close", None)):
            made.close()
    name = env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)
    if not isinstance(seats, int) or seats < 2:
        hint = " (TextArena's two-player games: env_kwargs {opponent: seats})" if "TextArena" in str(name) else ""
        raise ConfigError(f"{name} does not say whose turn it is: a multi-agent env sets num_seats >= 2 and "
                          f"info['seat'] at every reset and step{hint}")
    return seats


def check_seats(policies: Sequence[Any], num_seats: int) -> None:
    """Every seat filled, and no more policies than seats; refused with the fix."""
    empty = [s for s, p in enumerate(policies) if p is None]
    if len(policies) != num_seats or empty:
        seat = empty[0] if empty else min(len(policies), num_seats)
        raise ConfigError(f"the env has {num_seats} seats and {len(policies)} policies were given"
                          + (f" (seat {seat} is empty)" if empty or len(policies) < num_seats else "")
                          + f": fill every seat with one policy (e.g. 'random', 'hf:MODEL', 'checkpoint:DIR', "
                            f"'openai:URL'), seats 0..{num_seats - 1} in order")


def load_seat_policy(spec: str, seat: int | str, **kwargs: Any) -> Policy:
    """`load_policy(spec)` for a seat; a spec that fails to load is refused, naming the seat and the fix."""
    try:
        return load_policy(spec, **kwargs)
    except Exception as exc:  # any loader failure: bad kind, missing folder, unreachable server, ...
        raise ConfigError(f"seat {seat}: the policy spec {spec!r} failed to load ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:300] if str(exc) else ''}); give a spec that loads: random, "
                          f"hf:MODEL, checkpoint:DIR (a training checkpoint), openai:URL#MODEL, scripted:FILE:FUNC"
                          ) from exc


class _Match:
    """Mutable state of one running match: one `_Episode` per seat, sharing the env in `slot`, and the engine
    (policy + chat) of each seat."""

    def __init__(self, slot: int, seed: int, group_id: int, sample_index: int, num_seats: int,
                 engines: list[_Engine], names: tuple[str, ...]):
        self.slot, self.seed, self.group_id, self.sample_index = slot, seed, group_id, sample_index
        self.engines, self.names = engines, names
        self.eps = [_Episode(slot, seed, group_id * num_seats + s, sample_index) for s in range(num_seats)]
        self.started = [False] * num_seats
        self.pending: list[dict[str, Any] | None] = [None] * num_seats  # a seat's turn waiting for its outcome
        self.reset: ResetResult | None = None
        self.seat: int | None = None
        self.obs = ""
        self.info: dict[str, Any] = {}
        self.order: list[int] = []
        self.done = False


class _Seats:
    """The per-seat engines and the match logic of the turn loop."""

    def __init__(self, pool: EnvPool, num_seats: int, rewards: str):
        self.pool, self.num_seats, self.rewards = pool, num_seats, rewards

    def start(self, m: _Match, result: ResetResult | EnvFailure) -> None:
        if isinstance(result, EnvFailure):
            self.fail(m, result.message)
            return
        m.reset = result
        self.advance(m, result.obs, result.info)

    def advance(self, m: _Match, obs: str, info: dict[str, Any]) -> None:
        """The env says seat info['seat'] moves next, seeing `obs`."""
        if "seat" not in info:
            raise ConfigError(f"{m.reset.env_id if m.reset else 'the env'} does not say whose turn it is (no "
                              "info['seat']): a multi-agent env puts the seat to move in every reset and step info")
        seat = info["seat"]
        if not isinstance(seat, int) or not 0 <= seat < self.num_seats:
            self.fail(m, f"the env named seat {seat!r} to move, not one of 0..{self.num_seats - 1}")
            return
        m.seat, m.obs, m.info = seat, obs, info
        ep, engine = m.eps[seat], m.engines[seat]
        if not m.started[seat]:  # a seat's episode starts at its first turn, with what it sees then
            assert m.reset is not None
            engine.start(ep, replace(m.reset, obs=obs, info=info))
            m.started[seat] = True
        elif m.pending[seat] is not None:
            self.record(m, seat, obs, info, terminated=False, truncated=False)
        if ep.end_reason is not None:  # the seat hit its turn limit: the match stops there
            self.finish(m, truncated=True, obs=obs, info=info)

    def record(self, m: _Match, seat: int, obs: str, info: dict[str, Any], terminated: bool, truncated: bool,
               success: bool = False) -> None:
        """Seat `seat`'s waiting turn, with its next observation and every reward paid to it since it moved."""
        pending = m.pending[seat]
        m.pending[seat] = None
        if pending is None:
            return
        own = pending["info"]  # its own move's validity and components; the state it acts from next is `info`'s
        merged = {**info, "valid_action": own.get("valid_action", True), "success": success,
                  "reward_components": own.get("reward_components") or {}}
        result = StepResult(obs, pending["reward"], terminated, truncated, merged, pending["env_s"])
        m.engines[seat].record(m.eps[seat], pending["request"], pending["generation"], result,
                                  pending["generate_s"])

    def moved(self, m: _Match, gen: Generation, req: GenerationRequest, generate_s: float,
              result: StepResult | ResetResult | EnvFailure) -> None:
        """Seat m.seat's move came back from the env."""
        if not isinstance(result, StepResult):
            self.fail(m, result.message if isinstance(result, EnvFailure) else f"the env pool answered {result!r}")
            return
        acting = m.seat
        assert acting is not None
        m.order.append(acting)
        paid = result.info.get("seat_rewards")
        paid = {acting: result.reward} if paid is None else {int(s): float(r) for s, r in dict(paid).items()}
        if self.rewards == "zero_sum":
            paid = zero_sum(paid, self.num_seats)
        m.pending[acting] = {"request": req, "generation": gen, "generate_s": generate_s, "env_s": result.seconds,
                             "info": result.info, "reward": 0.0}
        for seat, reward in paid.items():
            waiting = m.pending[seat] if 0 <= seat < self.num_seats else None
            if waiting is not None:  # a seat paid before its first move has no action to credit it to
                waiting["reward"] += reward
        if result.terminated or result.truncated:
            self.finish(m, result.truncated and not result.terminated, result.obs, result.info)
        else:
            self.advance(m, result.obs, result.info)

    def finish(self, m: _Match, truncated: bool, obs: str, info: dict[str, Any]) -> None:
        """The game is over (or a seat ran out of turns): every seat's waiting turn is recorded as its last."""
        won = info.get("seat_success") or {}
        for seat, ep in enumerate(m.eps):
            if m.pending[seat] is not None:
                self.record(m, seat, obs, info, terminated=not truncated, truncated=truncated,
                            success=bool(won.get(seat, False)))
            if ep.end_reason is None:
                ep.end_reason = "truncated" if truncated else "terminated"
                ep.final_obs = obs
                ep.success = bool(won.get(seat, False))
            ep.t_end = ep.t_end or time.perf_counter()
        m.done = True

    def fail(self, m: _Match, message: str) -> None:
        """A policy or env failure: every seat's episode ends failed (the match says nothing about any seat)."""
        for seat, ep in enumerate(m.eps):
            ep.fail(message if seat == m.seat or m.seat is None else f"seat {m.seat} failed: {message}")
            ep.t_end = ep.t_end or time.perf_counter()
        m.done = True


def play_matches(env: Any, policies: Sequence[Any], chats: ChatFormat | Sequence[ChatFormat | None] | None,
                 seeds: Sequence[int], group_size: int = 1, config: RolloutConfig | None = None,
                 env_kwargs: dict[str, Any] | None = None, rewards: str = "game", start_group_id: int = 0,
                 reset_options: dict[str, Any] | None = None, players: Sequence[str] | None = None) -> list[Match]:
    """Play `len(seeds) * group_size` matches; matches come back group-major.

    `policies`: one seating for every group (seat s filled by `policies[s]`, a policy or a `Seat`), or one seating
    per seed (a list of seatings), e.g. a learner against a different opponent in each group. `chats` (one
    chat format for every seat, one per seat, or None: each policy's own) and `players` (the seats' names in the
    records) apply to plain policies; a `Seat` carries its own. Requests of one policy are batched across seats
    and matches, once per round. The loop is synchronous; `config.layout` may be trajectory or step."""
    config = config or RolloutConfig()
    if rewards not in REWARD_MODES:
        raise ConfigError(f"rewards must be one of {', '.join(REWARD_MODES)}, got {rewards!r}")
    if group_size < 1:
        raise ConfigError(f"group_size must be >= 1, got {group_size}")
    if config.async_mode or config.layout == "fold":
        raise ConfigError("multi-agent episodes run in the synchronous loop with the trajectory or step layout: set "
                          "rollout.async_mode=false and rollout.layout=trajectory or step")
    num_seats = seat_count(env, env_kwargs)
    per_group = bool(policies) and isinstance(policies[0], (list, tuple))
    seatings = [list(s) for s in policies] if per_group else [list(policies)] * len(seeds)
    if per_group and len(seatings) != len(seeds):
        raise ConfigError(f"give one seating per seed: {len(seatings)} seatings for {len(seeds)} seeds")
    for seating in seatings or [list(policies)]:
        check_seats([s.policy if isinstance(s, Seat) else s for s in seating], num_seats)
    per_seat: list[ChatFormat | None] = [chats] * num_seats if chats is None or isinstance(chats, ChatFormat) \
        else list(chats)
    if len(per_seat) != num_seats:
        raise ConfigError(f"chats: give one chat format, one per seat ({num_seats}), or None")
    if not seeds:
        return []
    matches = []
    own_pool = not isinstance(env, EnvPool)
    pool = make_pool(env, len(seeds) * group_size, config.executor, config.env_workers, env_kwargs, None,
                     config.env_timeout_s, ray_address=config.ray_address) if own_pool else env
    try:
        engines: dict[tuple[int, int], _Engine] = {}  # one engine per (policy, chat): stateless across matches
        for g, (seed, seating) in enumerate(zip(seeds, seatings)):
            filled = [s if isinstance(s, Seat) else Seat(s, per_seat[k], players[k] if players else "")
                      for k, s in enumerate(seating)]
            seat_engines = []
            for seat in filled:
                chat = _resolve_chat(seat.policy, seat.chat)
                key = (id(seat.policy), id(chat))
                if key not in engines:  # a policy that reads no token ids has no context to fill
                    tokens = getattr(seat.policy, "uses_tokens", True)
                    engines[key] = _Engine(pool, seat.policy, chat,
                                           config if tokens else replace(config, max_context_tokens=None))
                seat_engines.append(engines[key])
            names = tuple(s.name or type(s.policy).__name__ for s in filled)
            matches += [_Match(g * group_size + k, int(seed), start_group_id + g, k, num_seats, seat_engines, names)
                        for k in range(group_size)]
        options = {"tool_format": getattr(matches[0].engines[0].chat, "tool_format", "hermes"), **(reset_options or {})}
        seats = _Seats(pool, num_seats, rewards)
        for m, result in zip(matches, pool.reset([(m.slot, m.seed, options) for m in matches])):
            seats.start(m, result)
        _run(seats, matches)
    finally:
        if own_pool:
            pool.close()
    return [Match(tuple(ep.to_trajectory() for ep in m.eps), tuple(m.order), m.names, m.group_id, m.seed)
            for m in matches]


def _run(seats: _Seats, matches: list[_Match]) -> None:
    """Each round: every running match's seat-to-move asks its policy (one batch per distinct policy), then the
    envs step together."""
    active = [m for m in matches if not m.done]
    while active:
        asking: dict[int, list[tuple[_Match, GenerationRequest]]] = {}
        for m in active:
            seat = m.seat
            assert seat is not None
            req = m.engines[seat].request(m.eps[seat])
            if req is None:  # the seat's context is full: the match stops there
                seats.finish(m, truncated=True, obs=m.obs, info=m.info)
                continue
            asking.setdefault(id(m.engines[seat].policy), []).append((m, req))
        stepping: list[tuple[_Match, GenerationRequest, Generation, float]] = []
        for batch in asking.values():
            first, _ = batch[0]
            policy = first.engines[first.seat].policy  # type: ignore[index]
            t0 = time.perf_counter()
            gens = generate_isolated(policy, [req for _, req in batch])
            generate_s = time.perf_counter() - t0
            for (m, req), gen in zip(batch, gens):
                if gen.finish_reason == "error":
                    seats.fail(m, gen.error or "the policy returned an error generation")
                else:
                    stepping.append((m, req, gen, generate_s))
        results = seats.pool.step([(m.slot, gen.text) for m, _, gen, _ in stepping]) if stepping else []
        for (m, req, gen, generate_s), result in zip(stepping, results):
            seats.moved(m, gen, req, generate_s, result)
        active = [m for m in active if not m.done]
