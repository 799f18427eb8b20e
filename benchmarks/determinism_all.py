"""Gymnasium's own `check_env`, then the project's cheap determinism check (the one CI runs over every
id, tests/test_determinism_all.py), over every registered env id; prints failures, skips (a missing
dependency) and the seconds each family took, which is the CI cost of the determinism test.

    python3 benchmarks/determinism_all.py                 # every id
    python3 benchmarks/determinism_all.py ScienceWorld    # ids containing a word
"""
from __future__ import annotations

import sys
import time
import warnings
from collections import defaultdict

import agentgym
from agentgym.checker import as_missing_dependency, check_same_seed_same_task
from agentgym.errors import MissingDependencyError


def family(env_id: str) -> str:
    return env_id.rpartition("/")[2].split("-")[0]


def check_one(env_id: str) -> tuple[str, str, float, float]:
    """(status, detail, seconds of Gymnasium's check_env, seconds of the cheap check)."""
    from gymnasium.utils.env_checker import check_env

    try:
        t0 = time.perf_counter()
        env = agentgym.make(env_id)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
            t1 = time.perf_counter()
            check_same_seed_same_task(env, seed=123, steps=3)
            t2 = time.perf_counter()
        finally:
            env.close()
    except MissingDependencyError as exc:
        return "skipped", str(exc), 0.0, 0.0
    except Exception as exc:  # noqa: BLE001  every failure is reported, the loop goes on
        missing = as_missing_dependency(exc) if isinstance(exc, ImportError) else None
        if missing is not None:
            return "skipped", str(missing), 0.0, 0.0
        return "failed", f"{type(exc).__name__}: {str(exc)[:300]}", 0.0, 0.0
    return "ok", "", t1 - t0, t2 - t1


def main(words: list[str]) -> int:
    ids = [i for i in agentgym.list_envs() if not words or any(w in i for w in words)]
    seconds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    counts: dict[str, int] = defaultdict(int)
    start = time.perf_counter()
    for env_id in ids:
        status, detail, gym_s, cheap_s = check_one(env_id)
        counts[status] += 1
        row = seconds[family(env_id)]
        row[0] += gym_s
        row[1] += cheap_s
        row[2] += 1
        if status != "ok":
            print(f"{status:8} {env_id}: {detail}", flush=True)
    print(f"\n{len(ids)} ids in {time.perf_counter() - start:.0f} s: " +
          ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    print(f"{'family':14} {'ids':>4} {'gymnasium check_env s':>22} {'cheap check s':>14}")
    for name, (gym_s, cheap_s, n) in sorted(seconds.items()):
        print(f"{name:14} {n:4d} {gym_s:22.1f} {cheap_s:14.1f}")
    return 1 if counts.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
