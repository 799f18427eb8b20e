"""Two policies against each other on a multi-agent env, in both seat orders: win / draw / loss with intervals.

    record = play_versus("agentgym/TextArena-TicTacToe-v0", policy, opponent, seeds=range(8),
                         env_kwargs={"opponent": "seats"})

Every seed is played once with `policy` in seat 0 and once in seat 1 (the same openings, both orders), so a
first-mover advantage cancels out of the totals. The record counts the matches from `policy`'s side; a match
a failure ended (error) or a turn limit or full context cut short (cut) is counted apart, not as a loss or a draw. Rates carry 95% Wilson intervals.
"""
from __future__ import annotations

from typing import Any, Sequence

from agentgym.engine.multiagent import Match, play_matches
from agentgym.engine.rollout import RolloutConfig
from agentgym.eval.metrics import wilson_interval


def tally(matches: Sequence[Match], seat: int | Sequence[int]) -> dict[str, Any]:
    """Win / draw / loss counts, rates and 95% Wilson intervals of the policy in `seat` (one per match, or one
    for all); failed and cut-short matches are counted apart and left out of the rates."""
    seats = [seat] * len(matches) if isinstance(seat, int) else list(seat)
    counts = {"win": 0, "draw": 0, "loss": 0, "cut": 0, "error": 0}
    for match, s in zip(matches, seats):
        counts[match.outcome(s)] += 1
    n = counts["win"] + counts["draw"] + counts["loss"]
    record: dict[str, Any] = {"games": n, **counts}
    for key in ("win", "draw", "loss"):
        low, high = wilson_interval(counts[key], n)
        record[f"{key}_rate"] = counts[key] / n if n else 0.0
        record[f"{key}_ci"] = [low, high]
    return record


def play_versus(env: Any, policy: Any, opponent: Any, seeds: Sequence[int], config: RolloutConfig | None = None,
                env_kwargs: dict[str, Any] | None = None, chat: Any = None, opponent_chat: Any = None,
                names: tuple[str, str] = ("policy", "opponent"), reset_options: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """`policy` against `opponent` (two-seat env) on every seed in both seat orders: the record of each order
    ("as_seat_0", "as_seat_1") and of both together ("total"), from `policy`'s side, and the matches."""
    seeds = list(seeds)
    first = play_matches(env, [policy, opponent], [chat, opponent_chat], seeds, 1, config, env_kwargs,
                         players=names, reset_options=reset_options)
    second = play_matches(env, [opponent, policy], [opponent_chat, chat], seeds, 1, config, env_kwargs,
                          players=names[::-1], reset_options=reset_options)
    return {"as_seat_0": tally(first, 0), "as_seat_1": tally(second, 1),
            "total": tally(first + second, [0] * len(first) + [1] * len(second)), "matches": first + second}


def format_record(name: str, record: dict[str, Any]) -> str:
    """One line: W/D/L counts and the win rate with its interval."""
    low, high = record["win_ci"]
    return (f"{name}: {record['win']}W {record['draw']}D {record['loss']}L of {record['games']} "
            f"(win {record['win_rate']:.2f} [{low:.2f}, {high:.2f}]"
            + (f", {record['error']} failed" if record["error"] else "")
            + (f", {record['cut']} cut short" if record["cut"] else "") + ")")


def seat_kwargs(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A suite entry's kwargs for a match: TextArena's two-player games play their seats (opponent=seats) unless
    the entry says otherwise."""
    if env_id.startswith("agentgym/TextArena-") and "opponent" not in kwargs:
        return {**kwargs, "opponent": "seats"}
    return dict(kwargs)


def run_versus_command(args: Any, entries: Sequence[Any]) -> int:
    """`agentgym eval --opponent SPEC`: --policy against SPEC on every env of the suite, both seat orders; every
    env is checked (seats, both specs load) before any match runs. Writes OUT/versus.json (a rerun plays every
    match again: there is no resume log). The context flags apply; options that write trajectories are refused."""
    import json
    from pathlib import Path

    from agentgym.engine.multiagent import load_seat_policy, seat_count
    from agentgym.errors import ConfigError

    if args.samples != 1 or args.async_mode or args.layout == "fold" or args.fold_at_tokens is not None:
        raise ConfigError("--opponent plays each seed once per seat order in the synchronous loop: drop --samples, "
                          "--async, --layout fold and --fold-at-tokens")
    if args.keep_prompt_ids or args.tool_format != "auto":
        raise ConfigError("--opponent writes win/draw/loss records (versus.json), no trajectories, and TextArena "
                          "games take no tool calls: drop --keep-prompt-ids and --tool-format")
    envs = [(e.name, e.env_id, seat_kwargs(e.env_id, e.kwargs)) for e in entries]
    for name, env_id, kwargs in envs:
        if seat_count(env_id, kwargs) != 2:
            raise ConfigError(f"{name} has more than two seats: --opponent pits two policies; pick two-player envs")
    policy = load_seat_policy(args.policy, "policy (--policy)")
    opponent = load_seat_policy(args.opponent, "opponent (--opponent)")
    temperature = args.temperature if args.temperature is not None else 1.0
    from agentgym.policy import SamplingParams

    context = {name: getattr(args, name) for name in ("history_turns", "max_context_tokens", "max_observation_tokens")
               if getattr(args, name) is not None}
    config = RolloutConfig(max_turns=args.max_turns, layout=args.layout or "trajectory", **context,
                           sampling=SamplingParams(temperature=temperature, max_tokens=args.max_tokens, seed=args.seed),
                           env_workers=args.workers)
    seeds = range(args.seed, args.seed + args.episodes)
    results = {}
    for name, env_id, kwargs in envs:
        record = play_versus(env_id, policy, opponent, seeds, config, kwargs, names=(args.policy, args.opponent),
                             reset_options={"split": args.split})
        record.pop("matches")
        results[name] = record
        print(format_record(f"{name}: {args.policy} vs {args.opponent}", record["total"]))
        for order in ("as_seat_0", "as_seat_1"):
            print("  " + format_record(order, record[order]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "versus.json").write_text(json.dumps({"policy": args.policy, "opponent": args.opponent,
                                                 "seeds": list(seeds), "envs": results}, indent=1))
    print(f"results: {out / 'versus.json'}")
    return 0
