"""The league eval: the learner against every pool member (random, the start weights, each frozen snapshot), in
both seat orders on the same seeds, with win / draw / loss rates and 95% Wilson intervals
(agentgym/eval/versus.py); one JSON line per eval in run_dir/league_eval.jsonl."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgym.eval.versus import format_record, play_versus


def league_eval(ctx: Any, league: Any, learner: Any, iteration: int, config: Any) -> dict[str, Any]:
    """{member name: its record (as_seat_0, as_seat_1, total)} of `learner` against each pool member."""
    s, r = ctx.config.selfplay, ctx.config.rollout
    seeds = range(s.eval_seed_start, s.eval_seed_start + s.eval_games)
    results: dict[str, Any] = {}
    for i, member in enumerate(league.members):
        opponent = league.policy(member, learner, seed=s.eval_seed_start + i)
        record = play_versus(ctx.env_id, learner, opponent, seeds, config, dict(r.env_kwargs) or None,
                             chat=ctx.chat, names=("learner", member.name))
        record.pop("matches")
        results[member.name] = record
    return {"iteration": iteration, "opponents": results}


def write_league_eval(run_dir: Path, row: dict[str, Any]) -> None:
    with open(Path(run_dir) / "league_eval.jsonl", "a") as out:
        out.write(json.dumps(row) + "\n")
    for name, record in row["opponents"].items():
        print(f"agentgym train: league eval after {row['iteration']} iterations: "
              + format_record(f"vs {name}", record["total"]), flush=True)
