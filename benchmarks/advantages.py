"""Time each advantage estimator on 1e4, 1e5 and 1e6 turns with realistic anchor repetition.

    python benchmarks/advantages.py [--sizes 10000 100000 1000000] [--repeat 3]

The synthetic batch looks like GiGPO's household runs: groups of 8 rollouts of one task, 20 turns
each, anchors drawn from 40 states per task (so step groups repeat across and within rollouts),
sparse outcome rewards, 10% invalid actions. Prints the best-of-N wall time of each estimator per
size and the growth ratio from one size to the next (10x more turns; ~10x is linear). Pin to one
core with `taskset -c 0` to read the single-core target (GiGPO on 1e6 turns under 2 s).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from agentgym.train.estimators import advantages as A
from agentgym.trajectory import TurnTable


def synthetic_table(n_turns: int, group_size: int = 8, turns_per_traj: int = 20, states_per_task: int = 40,
                    seed: int = 0) -> TurnTable:
    rng = np.random.default_rng(seed)
    n_traj = n_turns // turns_per_traj
    traj = np.repeat(np.arange(n_traj), turns_per_traj)
    turn = np.tile(np.arange(turns_per_traj), n_traj)
    group = traj // group_size
    anchor = group * states_per_task + rng.integers(0, states_per_task, len(traj))
    reward = np.zeros(len(traj))
    last = turn == turns_per_traj - 1
    reward[last] = (rng.random(last.sum()) < 0.4).astype(float)
    valid = rng.random(len(traj)) > 0.1
    return TurnTable(group, traj, turn, anchor, reward, valid)


def estimators(table: TurnTable) -> dict[str, callable]:
    values = np.linspace(-1, 1, len(table))
    return {
        "gigpo": lambda: A.gigpo(table, gamma=0.95, w=1.0, invalid_penalty=0.1),
        "gigpo(mean)": lambda: A.gigpo(table, gamma=0.95, mode="mean"),
        "grpo": lambda: A.grpo(table),
        "rloo": lambda: A.rloo(table),
        "reinforce_pp": lambda: A.reinforce_pp(table, gamma=0.95),
        "turn_gae": lambda: A.turn_gae(table, values, 0.95, 0.95),
        "bi_level_gae(x4 tok)": lambda: A.bi_level_gae(table, np.repeat(np.arange(len(table)), 4),
                                                        np.repeat(values, 4), 0.95, 0.95, 1.0),
    }


def best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {}
    for n in args.sizes:
        table = synthetic_table(n)
        for name, fn in estimators(table).items():
            times.setdefault(name, []).append(best_time(fn, args.repeat))
    header = f"{'estimator':<22}" + "".join(f"{n:>12,d} turns" for n in args.sizes) + "   growth per 10x"
    print(header)
    for name, ts in times.items():
        growth = " ".join(f"x{b / a:.1f}" for a, b in zip(ts, ts[1:]))
        print(f"{name:<22}" + "".join(f"{t * 1e3:>15.1f} ms" for t in ts) + f"   {growth}")
    if 1_000_000 in args.sizes:
        t = times["gigpo"][args.sizes.index(1_000_000)]
        print(f"\nGiGPO on 1e6 turns: {t:.3f} s (target < 2 s on one core): {'met' if t < 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
