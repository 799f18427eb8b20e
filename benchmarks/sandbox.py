"""Sandbox speed, side by side: reset latency (docker cold, docker warm pool, bwrap), exec round trip,
and SWE episodes per minute with 8 concurrent envs, per back end.

A "reset" here is what an episode reset needs from the sandbox layer: a fresh sandbox holding the repo
(a mini repository, copied in). Cold = a container started for it; warm = taken from a `DockerPool`
kept topped up in the background (the pool is given a moment to refill between resets, as an env's
episode would). Targets: warm reset p50 < 100 ms, bwrap exec < 20 ms, docker exec < 60 ms.

    python benchmarks/sandbox.py                    # default sizes
    python benchmarks/sandbox.py --resets 30 --execs 100 --episodes 16
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from agentgym.envs.swe.sources import MINI_DIR
from agentgym.tools.sandbox import backend_problem, make_sandbox

REPO = os.path.join(MINI_DIR, "intervals")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def reset_latencies(kind: str, n: int) -> list[float]:
    out = []
    if kind == "docker warm":
        from agentgym.tools.sandbox.docker import DockerPool

        pool = DockerPool(size=2)
        time.sleep(3)  # filled before timing starts
        try:
            for _ in range(n):
                box = None

                def take():
                    nonlocal box
                    box = pool.acquire()
                    box.copy_in(REPO)
                out.append(timed(take))
                pool.release(box)
                _wait_filled(pool)
        finally:
            pool.close()
        return out
    backend = "docker" if kind == "docker cold" else "bwrap"
    for _ in range(n):
        box = None

        def make():
            nonlocal box
            box = make_sandbox(backend)
            box.copy_in(REPO)
        out.append(timed(make))
        box.close()
    return out


def _wait_filled(pool, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while len(pool._ready) < pool.size and time.monotonic() < deadline:
        time.sleep(0.05)


def exec_latencies(backend: str, n: int) -> list[float]:
    box = make_sandbox(backend)
    try:
        box.exec("true")
        return [timed(lambda: box.exec("true")) for _ in range(n)]
    finally:
        box.close()


def episodes_per_minute(backend: str, episodes: int, concurrency: int = 8) -> float:
    import agentgym

    envs = [agentgym.make("agentgym/SWE-Mini-v0", backend=backend, pool_size=concurrency)
            for _ in range(concurrency)]
    counter = iter(range(episodes))
    lock = threading.Lock()

    def work(env):
        while True:
            with lock:
                seed = next(counter, None)
            if seed is None:
                return
            env.reset(seed=seed)
            for _ in range(4):
                *_, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
                if terminated or truncated:
                    break
            assert info["success"], info

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(work, envs))
    seconds = time.perf_counter() - start
    for env in envs:
        env.close()
    return episodes / seconds * 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=20)
    parser.add_argument("--execs", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=16, help="episodes per back end for the throughput figure")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    usable = {b: backend_problem(b) is None for b in ("docker", "bwrap")}
    for b, ok in usable.items():
        if not ok:
            print(f"# {b} skipped: {backend_problem(b)}", file=sys.stderr)
    rows: dict[str, dict[str, float]] = {}
    for kind in ("docker cold", "docker warm", "bwrap"):
        if usable["docker" if kind.startswith("docker") else "bwrap"]:
            lat = reset_latencies(kind, args.resets)
            rows[f"reset {kind}"] = {"p50_ms": statistics.median(lat), "p99_ms": pct(lat, 0.99)}
    for backend in ("docker", "bwrap"):
        if usable[backend]:
            lat = exec_latencies(backend, args.execs)
            rows[f"exec {backend} (true)"] = {"p50_ms": statistics.median(lat), "p99_ms": pct(lat, 0.99)}
    for backend in ("docker", "bwrap"):
        if usable[backend]:
            rows[f"episodes/min {backend}, 8 envs"] = {"value": episodes_per_minute(backend, args.episodes)}
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'measure':34s} {'p50 ms':>9s} {'p99 ms':>9s} {'value':>9s}")
    for name, row in rows.items():
        cells = [f"{row[k]:9.1f}" if k in row else f"{'':9s}" for k in ("p50_ms", "p99_ms", "value")]
        print(f"{name:34s} {' '.join(cells)}")
    print(f"(cpus: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}; targets: warm reset p50 < 100 ms, "
          "bwrap exec < 20 ms, docker exec < 60 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
