"""Environment steps per second: the household env vs. the TextWorld adapter, side by side.

One process, one core, admissible actions on (both envs compute their admissible list every step),
a random-admissible policy, resets counted as part of the run. The two are measured in alternating
rounds so that a busy machine slows both alike; the ratio is the figure to read (target: the
household env >= 100x TextWorld). TextWorld game generation happens before timing and is reported
on its own.

    python benchmarks/env_speed.py                 # default: 3 rounds of ~1 s each per env
    python benchmarks/env_speed.py --rounds 5 --seconds 2
"""
from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import time


def measure(env, seconds: float, seed0: int, rng: random.Random, max_turns: int = 50) -> tuple[int, float]:
    """Steps done and seconds taken by a random-admissible policy playing episodes for ~`seconds`."""
    steps, start, seed = 0, time.perf_counter(), seed0
    while time.perf_counter() - start < seconds:
        _, info = env.reset(seed=seed)
        seed += 1
        for _ in range(max_turns):
            _, _, terminated, truncated, info = env.step(rng.choice(info["admissible_actions"]))
            steps += 1
            if terminated or truncated:
                break
    return steps, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per env per round")
    parser.add_argument("--tw-games", type=int, default=1, help="distinct generated TextWorld games to cycle")
    parser.add_argument("--cache-dir", default=None, help="TextWorld game cache (default: a temporary folder)")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:  # removes the temporary game cache at the end
        return run(args, stack)


def run(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    from agentgym.envs.household.env import HouseholdEnv

    household = HouseholdEnv()
    tw = None
    try:
        from agentgym.envs.textworld.env import TextWorldEnv

        cache = args.cache_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="agentgym-tw-"))
        tw = TextWorldEnv(cache_dir=cache, game_pool=args.tw_games)
        start = time.perf_counter()
        for seed in range(args.tw_games):  # generate (and cache) the games before timing
            tw.reset(seed=seed)
        gen = time.perf_counter() - start
        print(f"textworld: generated {args.tw_games} games (custom, 3 rooms, 5 objects, quest 3) "
              f"in {gen:.1f} s, {gen / args.tw_games:.1f} s/game (not in the step timings)")
    except ImportError as exc:
        print(f"textworld not installed ({exc}); measuring the household env only")

    rates: dict[str, list[float]] = {"household": [], "textworld": []}
    rng = random.Random(0)
    for r in range(args.rounds):
        steps, secs = measure(household, args.seconds, 1000 * r, rng)
        rates["household"].append(steps / secs)
        if tw is not None:
            steps, secs = measure(tw, args.seconds, 1000 * r, rng)
            rates["textworld"].append(steps / secs)
        line = "  ".join(f"{k} {v[-1]:,.0f} steps/s" for k, v in rates.items() if v)
        print(f"round {r + 1}/{args.rounds}: {line}")
    house = statistics.median(rates["household"])
    print(f"household env:     {house:>10,.0f} steps/s (median of {args.rounds} rounds)")
    if tw is not None:
        text = statistics.median(rates["textworld"])
        print(f"textworld adapter: {text:>10,.0f} steps/s (median of {args.rounds} rounds)")
        ratio = house / text
        print(f"household / textworld = {ratio:,.0f}x (target >= 100x: {'met' if ratio >= 100 else 'NOT met'})")
        tw.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
