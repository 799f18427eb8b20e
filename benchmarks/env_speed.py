"""Environment steps per second: the household env vs. the TextWorld adapter, side by side
(and ScienceWorld and TextArena where installed).

One process, one core, admissible actions on (both envs compute their admissible list every step),
a random-admissible policy, resets counted as part of the run. The two are measured in alternating
rounds so that a busy machine slows both alike; the ratio is the figure to read (target: the
household env >= 100x TextWorld). TextWorld game generation happens before timing and is reported
on its own.

    python benchmarks/env_speed.py                 # default: 3 rounds of ~1 s each per env
    python benchmarks/env_speed.py --rounds 5 --seconds 2
    python benchmarks/env_speed.py --served       # also: served over loopback vs in-process, snapshot costs

ScienceWorld (its JVM, started before timing) is measured with the simulator's valid-action list on
(`info["admissible_actions"]`, random choices from it) and off (the policy fetches the same list
itself, off the clock, so both play the same kind of episode); TextArena with a random bracketed move from what the game
last showed (TowerOfHanoi single-player; TicTacToe, whose steps include the random opponent's move).
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
    parser.add_argument("--served", action="store_true", help="then the served env and snapshot costs "
                        "(benchmarks/env_serve_speed.py)")
    args = parser.parse_args(argv)
    if args.served:
        import importlib.util
        from pathlib import Path

        path = Path(__file__).with_name("env_serve_speed.py")
        spec = importlib.util.spec_from_file_location("env_serve_speed", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        module.main(["--rounds", str(args.rounds)])

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
    extras = third_party_envs()
    rates.update({name: [] for name in extras})
    rng = random.Random(0)
    for r in range(args.rounds):
        steps, secs = measure(household, args.seconds, 1000 * r, rng)
        rates["household"].append(steps / secs)
        if tw is not None:
            steps, secs = measure(tw, args.seconds, 1000 * r, rng)
            rates["textworld"].append(steps / secs)
        for name, (env, pick) in extras.items():
            steps, secs = measure_with(env, args.seconds, 1000 * r, pick, rng)
            rates[name].append(steps / secs)
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
    for name, (env, _) in extras.items():
        rate = statistics.median(rates[name])
        print(f"{name + ':':<32s} {rate:>10,.1f} steps/s (median of {args.rounds} rounds; household / it = "
              f"{house / rate:,.0f}x)")
        env.close()
    return 0


def measure_with(env, seconds: float, seed0: int, pick, rng: random.Random, max_turns: int = 50
                 ) -> tuple[int, float]:
    """As `measure`, with `pick(obs, info, rng, memo)` choosing each action (memo: per-episode scratch;
    time a pick records in memo["excluded"] is the policy's own and not counted)."""
    steps, start, seed, excluded = 0, time.perf_counter(), seed0, 0.0
    while time.perf_counter() - start - excluded < seconds:
        obs, info = env.reset(seed=seed)
        memo: dict = {"excluded": 0.0}
        seed += 1
        for _ in range(max_turns):
            obs, _, terminated, truncated, info = env.step(pick(obs, info, rng, memo))
            steps += 1
            if terminated or truncated:
                break
        excluded += memo["excluded"]
    return steps, time.perf_counter() - start - excluded


def third_party_envs() -> dict:
    """ScienceWorld (valid actions on / off) and TextArena envs with their random policies, where installed."""
    envs: dict = {}
    try:
        from agentgym.envs.scienceworld.env import ScienceWorldEnv

        def from_list(obs, info, rng, memo):
            return rng.choice(info["admissible_actions"])

        def from_untimed_list(obs, info, rng, memo):  # the same list, fetched by the policy, off the clock
            start = time.perf_counter()
            actions = sorted(str(a) for a in sw_off._sim.server.getValidActionObjectCombinations())
            memo["excluded"] += time.perf_counter() - start
            return rng.choice(actions)

        sw_on = ScienceWorldEnv(task="find-animal", valid_actions=True)
        sw_off = ScienceWorldEnv(task="find-animal", valid_actions=False)
        start = time.perf_counter()
        sw_on.reset(seed=0)
        sw_off.reset(seed=0)
        print(f"scienceworld: started 2 JVMs and loaded a task in {time.perf_counter() - start:.1f} s "
              "(not in the step timings)")
        envs["scienceworld (valid actions on)"] = (sw_on, from_list)
        envs["scienceworld (valid actions off)"] = (sw_off, from_untimed_list)
    except ImportError as exc:
        print(f"scienceworld not measured ({exc})")
    try:
        from agentgym.envs.textarena.env import TextArenaEnv, random_bracketed_move

        def bracketed(obs, info, rng, memo):
            memo.setdefault("seen", []).append(obs)
            return random_bracketed_move(memo["seen"], rng)

        for game in ("TowerOfHanoi-v0", "TicTacToe-v0"):
            env = TextArenaEnv(game)
            env.reset(seed=0)
            envs[f"textarena {game}"] = (env, bracketed)
    except ImportError as exc:
        print(f"textarena not measured ({exc})")
    return envs


if __name__ == "__main__":
    sys.exit(main())
