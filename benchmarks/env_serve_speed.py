"""The served env and snapshots, for `env_speed.py --served` (or run alone):

- steps/s and per-step latency (p50, p99) of the household env played in-process vs through
  `agentgym serve env` over loopback (the server in its own process, as in real use), one client and
  `--clients` concurrent clients, measured in alternating rounds so a busy machine slows both alike;
- snapshot()/restore() cost per env family after reset + 3 steps: microseconds and bytes, in-process, and
  for the household through the server (a signed snapshot over HTTP).

    python benchmarks/env_serve_speed.py --rounds 3 --steps 300 --clients 8
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HOUSEHOLD = "agentgym/Household-v0"
FAMILIES = (("toy keydoor", "agentgym/Toy-KeyDoor-v0", {}), ("toy calculator", "agentgym/Toy-Calculator-v0", {}),
            ("household", HOUSEHOLD, {}), ("search", "agentgym/Search-v0", {}),
            ("shop (text)", "agentgym/WebShop-v0", {"num_products": 1000}),
            ("textarena TowerOfHanoi", "agentgym/TextArena-TowerOfHanoi-v0", {}),
            ("textarena TicTacToe", "agentgym/TextArena-TicTacToe-v0", {}),
            ("textarena Othello", "agentgym/TextArena-Othello-v0", {}),
            ("swe minirepo (bwrap)", "agentgym/SWE-Mini-v0", {"backend": "bwrap"}),
            ("swe minirepo (docker)", "agentgym/SWE-Mini-v0", {"backend": "docker"}))


def play(env, steps: int, seed: int) -> list[float]:
    """Per-step seconds of a random-admissible policy over `steps` steps (resets not timed)."""
    rng, latencies = random.Random(seed), []
    _, info = env.reset(seed=seed)
    while len(latencies) < steps:
        action = rng.choice(info.get("admissible_actions") or ["look"])
        t0 = time.perf_counter()
        _, _, terminated, truncated, info = env.step(action)
        latencies.append(time.perf_counter() - t0)
        if terminated or truncated:
            seed += 1
            _, info = env.reset(seed=seed)
    return latencies


def concurrent(make, clients: int, steps: int) -> tuple[float, list[float]]:
    """(total steps/s, all latencies) of `clients` threads, each with its own env, playing at once."""
    envs = [make() for _ in range(clients)]
    results: list[list[float]] = [[] for _ in range(clients)]
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, play(envs[i], steps, 100 * i)))
               for i in range(clients)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - t0
    for env in envs:
        env.close()
    return clients * steps / wall, [x for r in results for x in r]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_server(env_id: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "agentgym", "serve", "env", env_id, "--port", "0"],
                            stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    line = proc.stdout.readline() if proc.stdout else ""
    if " at " not in line:
        proc.kill()
        raise SystemExit(f"the env server did not start: {line!r}")
    return proc, line.split(" at ")[1].split()[0]


def served_figures(args: argparse.Namespace) -> None:
    import agentgym

    proc, url = start_server(HOUSEHOLD)
    try:
        modes = {"in-process": lambda: agentgym.make(HOUSEHOLD),
                 "served (loopback)": lambda: agentgym.make(f"remote:{url}/{HOUSEHOLD}")}
        rates: dict[str, list[float]] = {f"{m}, {c} client{'s' if c > 1 else ''}": [] for m in modes
                                         for c in (1, args.clients)}
        lat: dict[str, list[float]] = {k: [] for k in rates}
        for r in range(args.rounds):
            for mode, make in modes.items():
                for clients in (1, args.clients):
                    key = f"{mode}, {clients} client{'s' if clients > 1 else ''}"
                    rate, latencies = concurrent(make, clients, args.steps)
                    rates[key].append(rate)
                    lat[key].extend(latencies)
            print(f"round {r + 1}/{args.rounds}: " + "  ".join(f"{k}: {v[-1]:,.0f}/s" for k, v in rates.items()))
        print(f"\nhousehold env, random admissible actions, {args.steps} steps per client per round; steps/s is "
              f"wall time with resets included (median of {args.rounds} rounds), latency is per step():")
        for key in rates:
            print(f"  {key:<32s} {statistics.median(rates[key]):>10,.0f} steps/s   p50 "
                  f"{pct(lat[key], 0.5) * 1e6:>8,.0f} us   p99 {pct(lat[key], 0.99) * 1e6:>8,.0f} us")
        one = [k for k in rates if k.endswith(" 1 client")]
        print(f"  in-process / served, 1 client = "
              f"{statistics.median(rates[one[0]]) / statistics.median(rates[one[1]]):,.1f}x")
        remote = agentgym.make(f"remote:{url}/{HOUSEHOLD}")
        snap_cost(remote, "household via the server (HTTP, signed)", args.repeats)
        remote.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def snap_cost(env, name: str, repeats: int) -> None:
    from agentgym.snapshot import restore, snapshot

    env.reset(seed=0)
    _, info = env.reset(seed=0)
    rng = random.Random(0)
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(rng.choice(info.get("admissible_actions") or ["look"]))
        if terminated or truncated:
            _, info = env.reset(seed=1)
    takes, backs = [], []   # interleaved, and medians: a shared machine's stalls would dominate a mean
    for _ in range(repeats):
        t0 = time.perf_counter()
        data = snapshot(env)
        takes.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        restore(env, data)
        backs.append(time.perf_counter() - t0)
    taken, back = statistics.median(takes), statistics.median(backs)
    print(f"  {name:<44s} snapshot {taken * 1e6:>9,.0f} us   restore {back * 1e6:>9,.0f} us   {len(data):>9,} bytes")


def snapshot_figures(args: argparse.Namespace) -> None:
    import agentgym
    from agentgym.errors import AgentGymError, MissingDependencyError

    print(f"\nsnapshot / restore after reset + 3 steps (median of {args.repeats}):")
    for name, env_id, kwargs in FAMILIES:
        try:
            env = agentgym.make(env_id, **kwargs)
            env.reset(seed=0)
        except (MissingDependencyError, ImportError, AgentGymError) as exc:
            print(f"  {name:<44s} not measured ({exc})")
            continue
        snap_cost(env, name, args.repeats)
        env.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="steps per client per round")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients in the second setting")
    parser.add_argument("--repeats", type=int, default=50, help="snapshot/restore repetitions per env")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    served_figures(args)
    snapshot_figures(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
