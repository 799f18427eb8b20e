"""Two policies against each other on a multi-agent env, in both seat orders: win / draw / loss with intervals.

    record = play_versus("agentgym/TextArena-TicTacToe-v0", policy, opponent, seeds=range(8),
                         env_kwargs={"opponent": "seats"})

Every seed is played once with `policy` in seat 0 and once in seat 1 (the same openings, both orders), so a
first-mover advantage cancels out of the totals. The record counts the matches from `policy`'s side; a match
a failure ended is counted apart (error), not as a loss. Rates carry 95% Wilson intervals.
"""
from __future__ import annotations

from typing import Any, Sequence

from agentgym.engine.multiagent import Match, play_matches
from agentgym.engine.rollout import RolloutConfig
from agentgym.eval.metrics import wilson_interval


def tally(matches: Sequence[Match], seat: int | Sequence[int]) -> dict[str, Any]:
    """Win / draw / loss counts, rates and 95% Wilson intervals of the policy in `seat` (one per match, or one
    for all); errors are counted apart and left out of the rates."""
    seats = [seat] * len(matches) if isinstance(seat, int) else list(seat)
    counts = {"win": 0, "draw": 0, "loss": 0, "error": 0}
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
                names: tuple[str, str] = ("policy", "opponent")) -> dict[str, Any]:
    """`policy` against `opponent` (two-seat env) on every seed in both seat orders: the record of each order
    ("as_seat_0", "as_seat_1") and of both together ("total"), from `policy`'s side, and the matches."""
    seeds = list(seeds)
    first = play_matches(env, [policy, opponent], [chat, opponent_chat], seeds, 1, config, env_kwargs,
                         players=names)
    second = play_matches(env, [opponent, policy], [opponent_chat, chat], seeds, 1, config, env_kwargs,
                          players=names[::-1])
    return {"as_seat_0": tally(first, 0), "as_seat_1": tally(second, 1),
            "total": tally(first + second, [0] * len(first) + [1] * len(second)), "matches": first + second}


def format_record(name: str, record: dict[str, Any]) -> str:
    """One line: W/D/L counts and the win rate with its interval."""
    low, high = record["win_ci"]
    return (f"{name}: {record['win']}W {record['draw']}D {record['loss']}L of {record['games']} "
            f"(win {record['win_rate']:.2f} [{low:.2f}, {high:.2f}]"
            + (f", {record['error']} failed" if record["error"] else "") + ")")
