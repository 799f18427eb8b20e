"""Scaling out, measured: env steps/s on 1, 2, 4 Ray workers and training samples/s on 1 and 2 gloo ranks.

Env steps: one RayPool of `--envs` envs (each actor holds envs i % workers), stepped in batches with a
random admissible action each (resets when an episode ends are counted as steps), for `--seconds`.
Ray is started locally with 4 CPUs (or joins `--ray-address`). Training: the toy_learning preset on
the tiny model for `--iterations` iterations, as 1 process and as `torchrun --nproc_per_node 2`
(gloo); samples/s = trained samples / the update's wall time (metrics time/train), rollouts excluded.
On a machine with fewer cores than workers/ranks the figures show the overhead, not a speed-up.

    python benchmarks/scale.py                      # both parts
    python benchmarks/scale.py --part env --env agentgym/Household-v0 --seconds 5
"""
from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def env_steps_per_s(env: str, n_envs: int, workers: int, seconds: float, address: str) -> float:
    from agentgym.vector import EnvFailure, make_pool

    rng = random.Random(0)
    with make_pool(env, n_envs, "ray", workers=workers, ray_address=address) as pool:
        results = pool.reset([(i, i, None) for i in range(n_envs)])
        seed, steps, start = n_envs, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            actions = []
            for i, r in enumerate(results):
                admissible = (getattr(r, "info", None) or {}).get("admissible_actions") or ["look"]
                actions.append((i, rng.choice(list(admissible))))
            results = pool.step(actions)
            steps += len(actions)
            ended = [i for i, r in enumerate(results) if isinstance(r, EnvFailure) or r.terminated or r.truncated]
            if ended:
                fresh = pool.reset([(i, seed + k, None) for k, i in enumerate(ended)])
                seed += len(ended)
                for i, r in zip(ended, fresh):
                    results[i] = r
        return steps / (time.perf_counter() - start)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_samples_per_s(ranks: int, iterations: int, run_dir: Path) -> tuple[float, float]:
    """(samples/s of the update, final policy_loss) of a toy_learning run on `ranks` processes."""
    from agentgym.train.metrics import read_metrics

    overrides = [f"train.run_dir={run_dir}", f"train.iterations={iterations}", "eval.every=0",
                 "train.torch_threads=1", "logging.progress=false"]
    launch = [sys.executable, "-m", "agentgym.train"] if ranks == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr",
        "127.0.0.1", "--master_port", str(_free_port()), "-m", "agentgym.train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*launch, "toy_learning", *overrides], check=True, env=env, capture_output=True)
    rows = read_metrics(run_dir)[1:] or read_metrics(run_dir)  # the first iteration warms up
    samples = sum(r["samples"] for r in rows)
    return samples / sum(r["time/train"] for r in rows), rows[-1]["policy_loss"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("env", "train", "both"), default="both")
    p.add_argument("--env", default="agentgym/Household-v0")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--ray-address", default="")
    p.add_argument("--iterations", type=int, default=3)
    a = p.parse_args(argv)
    print(f"cores: {os.cpu_count()}")
    if a.part in ("env", "both"):
        import ray

        if not a.ray_address:
            ray.init(num_cpus=4, log_to_driver=False, include_dashboard=False)
        rates = {w: env_steps_per_s(a.env, a.envs, w, a.seconds, a.ray_address) for w in (1, 2, 4)}
        print(f"env steps/s ({a.env}, {a.envs} envs, Ray actors):  " +
              "  ".join(f"{w} workers: {r:8.0f}" for w, r in rates.items()) +
              f"   ratio 4/1: {rates[4] / rates[1]:.2f}x")
        ray.shutdown()
    if a.part in ("train", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            one, loss1 = train_samples_per_s(1, a.iterations, Path(tmp) / "one")
            two, loss2 = train_samples_per_s(2, a.iterations, Path(tmp) / "two")
        print(f"training samples/s (toy_learning, tiny model, gloo):  1 rank: {one:8.1f}  2 ranks: {two:8.1f}"
              f"   ratio 2/1: {two / one:.2f}x   (last policy_loss {loss1:.6f} vs {loss2:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
