"""Survey ScienceWorld's tasks: does the gold-path oracle solve them, and how does random play do?

    python -m agentgym.envs.scienceworld.survey                      # every task, seed 0 of each split
    python -m agentgym.envs.scienceworld.survey --tasks boil melt --random-episodes 5

One env (one JVM) plays everything. The oracle follows the gold path within the task's registered turn
limit; the random player picks uniformly from `info["admissible_actions"]` for `--random-turns` turns.
Prints one line per task and a JSON summary (`--json PATH`)."""
from __future__ import annotations

import argparse
import json
import random
import time


def play_oracle(env, seed: int, split: str, limit: int) -> tuple[bool, float, int]:
    env.reset(seed=seed, options={"split": split})
    total, turns, info = 0.0, 0, {"success": False}
    for turns in range(1, limit + 1):
        action = env.oracle_action()
        if action is None:
            break
        _, reward, terminated, _, info = env.step(action)
        total += reward
        if terminated:
            break
    return bool(info["success"]), total, turns


def play_random(env, seed: int, turns: int, rng: random.Random) -> tuple[bool, float]:
    _, info = env.reset(seed=seed)
    total = 0.0
    for _ in range(turns):
        _, reward, terminated, _, info = env.step(rng.choice(info["admissible_actions"] or ["look around"]))
        total += reward
        if terminated:
            break
    return bool(info["success"]), total


def main(argv: list[str] | None = None) -> None:
    from agentgym.envs.scienceworld.env import ScienceWorldEnv
    from agentgym.envs.scienceworld.tasks import TASKS, env_id
    from agentgym.registration import spec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=[t.name for t in TASKS])
    parser.add_argument("--splits", nargs="*", default=["train", "dev", "test"])
    parser.add_argument("--random-episodes", type=int, default=3)
    parser.add_argument("--random-turns", type=int, default=30)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    limits = {t.name: spec(env_id(t.name)).max_episode_steps or 100 for t in TASKS}
    env = ScienceWorldEnv(task=args.tasks[0])
    rows = []
    try:
        for task in args.tasks:
            env.task, env._loaded, env._gold = task, None, None
            started = time.perf_counter()
            env.valid_actions = False
            oracle = [play_oracle(env, 0, split, limits[task]) for split in args.splits]
            env.valid_actions = True
            rng = random.Random(0)
            randoms = [play_random(env, seed, args.random_turns, rng) for seed in range(args.random_episodes)]
            row = {"task": task, "oracle_success": sum(o[0] for o in oracle) / len(oracle),
                   "oracle_turns": [o[2] for o in oracle],
                   "random_success": sum(r[0] for r in randoms) / len(randoms),
                   "random_return": sum(r[1] for r in randoms) / len(randoms),
                   "seconds": time.perf_counter() - started}
            rows.append(row)
            print(f"{task:50s} oracle {row['oracle_success']:.2f} (turns {row['oracle_turns']}) random success "
                  f"{row['random_success']:.2f} return {row['random_return']:+.2f} ({row['seconds']:.0f} s)",
                  flush=True)
    finally:
        env.close()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
