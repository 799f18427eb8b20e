"""Survey the installed TextArena: which games run here, and how a random player does.

    python -m agentgym.envs.textarena.survey            # the games agentgym registers
    python -m agentgym.envs.textarena.survey --all      # every game id textarena registers (finds new ones)

For each game: reset and play `--episodes` seeded episodes with a random player (a random bracketed move
from what the game last showed it, the same policy as the two-player opponent), then throw the checker's
garbage actions at it. Prints one line per game and a JSON summary (`--json PATH`)."""
from __future__ import annotations

import argparse
import json
import random
import signal
import time
from typing import Any


def play_random(env: Any, seed: int, max_turns: int = 200) -> tuple[bool, float, int]:
    from agentgym.envs.textarena.env import random_bracketed_move

    rng, seen = random.Random(seed), []
    obs, info = env.reset(seed=seed)
    seen.append(obs)
    total, turns = 0.0, 0
    for turns in range(1, max_turns + 1):
        obs, reward, terminated, truncated, info = env.step(random_bracketed_move(seen, rng))
        seen.append(obs)
        total += reward
        if terminated:
            break
    return bool(info["success"]), total, turns


def survey_game(game: str, players: int | None, episodes: int) -> dict[str, Any]:
    from agentgym.checker import check_any_string
    from agentgym.envs.textarena import catalog
    from agentgym.envs.textarena.env import TextArenaEnv

    if game not in catalog.GAMES:  # --all: try it as a one- then a two-player game
        catalog.GAMES[game] = catalog.Game(game, players or 1)
    started = time.perf_counter()
    env = TextArenaEnv(game)
    try:
        results = [play_random(env, seed) for seed in range(episodes)]
        check_any_string(env, seed=0)
    finally:
        env.close()
    return {"game": game, "players": catalog.GAMES[game].players,
            "random_success": sum(r[0] for r in results) / episodes,
            "random_return": sum(r[1] for r in results) / episodes,
            "turns": sum(r[2] for r in results) / episodes, "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every id textarena registers, not only agentgym's")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--timeout", type=int, default=60, help="seconds per game before it counts as hanging")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    from agentgym.envs.textarena.catalog import GAMES

    games: dict[str, int | None] = {g: spec.players for g, spec in GAMES.items()}
    if args.all:
        from textarena.envs.registration import ENV_REGISTRY

        games = {g: GAMES[g].players if g in GAMES else None for g in ENV_REGISTRY
                 if not g.endswith(("-raw", "-train"))}

    def hang(*_):
        raise TimeoutError(f"no result within {args.timeout} s")

    signal.signal(signal.SIGALRM, hang)
    rows = []
    for game, players in games.items():
        signal.alarm(args.timeout)
        try:
            row = survey_game(game, players, args.episodes)
        except BaseException as exc:  # a survey reports every failure, whatever it is
            if isinstance(exc, KeyboardInterrupt):
                raise
            row = {"game": game, "players": players, "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
        finally:
            signal.alarm(0)
        rows.append(row)
        if "error" in row:
            print(f"{game:45s} FAILS  {row['error']}", flush=True)
        else:
            print(f"{game:45s} {row['players']}p random success {row['random_success']:.2f} "
                  f"return {row['random_return']:+.2f} turns {row['turns']:.1f} ({row['seconds']:.2f} s)", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
