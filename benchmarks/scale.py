"""Scaling out, measured: env steps/s on 1, 2, 4 Ray workers and training samples/s on 1 and 2 gloo ranks
(ddp and fsdp side by side).

Env steps: one RayPool of `--envs` envs (each actor holds envs i % workers), stepped in batches with a
random admissible action each (resets when an episode ends are counted as steps), for `--seconds`.
Ray is started locally with 4 CPUs (or joins `--ray-address`). Training: the toy_learning preset on
the tiny model (or, with `--hidden/--layers`, a bigger random Llama on its vocabulary) for
`--iterations` iterations, as 1 process and as `torchrun --nproc_per_node 2` (gloo) with
train.distributed=ddp and =fsdp; samples/s = trained samples / the update's wall time (metrics
time/train: scoring, the PPO step and, under fsdp, the gather into rank 0's rollout copy), rollouts
excluded; "push" is that gather's share. On a machine with fewer cores than workers/ranks the figures
show the overhead, not a speed-up.

    python benchmarks/scale.py                      # both parts
    python benchmarks/scale.py --part env --env agentgym/Household-v0 --seconds 5
    python benchmarks/scale.py --part train --hidden 256 --layers 4
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def env_steps_per_s(env: str, n_envs: int, workers: int, seconds: float, address: str) -> float:
    from agentgym.engine.vector import EnvFailure, make_pool

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


def model_overrides(hidden: int, layers: int) -> list[str]:
    """A random Llama of that size on the tiny model's word vocabulary (nothing: the tiny model itself)."""
    if not hidden:
        return []
    spec = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": hidden * 4,
            "num_hidden_layers": layers, "num_attention_heads": max(1, hidden // 64),
            "num_key_value_heads": max(1, hidden // 64), "tie_word_embeddings": True,
            "max_position_embeddings": 512}
    return ["model.init_from_config={" + ", ".join(f"{k}: {v}" for k, v in spec.items()) + "}"]


def train_samples_per_s(ranks: int, mode: str, iterations: int, run_dir: Path, extra: list[str]
                        ) -> tuple[float, float, float]:
    """(samples/s of the update, final policy_loss, mean seconds of the weight push per iteration) of a
    toy_learning run on `ranks` processes with train.distributed=`mode`."""
    from agentgym.train.metrics import read_metrics

    overrides = [f"train.run_dir={run_dir}", f"train.iterations={iterations}", "eval.every=0",
                 "train.torch_threads=1", "logging.progress=false", f"train.distributed={mode}", *extra]
    launch = [sys.executable, "-m", "agentgym.train"] if ranks == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
        "-m", "agentgym.train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([*launch, "toy_learning", *overrides], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{mode} on {ranks} rank(s) failed:\n{out.stderr[-3000:]}")
    rows = read_metrics(run_dir)[1:] or read_metrics(run_dir)  # the first iteration warms up
    samples = sum(r["samples"] for r in rows)
    push = sum(r.get("time/push_weights", 0.0) for r in rows) / len(rows)
    return samples / sum(r["time/train"] for r in rows), rows[-1]["policy_loss"], push


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("env", "train", "both"), default="both")
    p.add_argument("--env", default="agentgym/Household-v0")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--ray-address", default="")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--hidden", type=int, default=0, help="train a random Llama this wide (0: the tiny model)")
    p.add_argument("--layers", type=int, default=4, help="its decoder layers (with --hidden)")
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
        extra = model_overrides(a.hidden, a.layers)
        runs = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, ranks, mode in (("1 rank", 1, "none"), ("ddp 2 ranks", 2, "ddp"), ("fsdp 2 ranks", 2, "fsdp")):
                runs[name] = train_samples_per_s(ranks, mode, a.iterations, Path(tmp) / mode, extra)
        model = f"random Llama {a.hidden}x{a.layers}" if a.hidden else "tiny model"
        one = runs["1 rank"][0]
        print(f"training samples/s (toy_learning, {model}, gloo):  " +
              "  ".join(f"{name}: {rate:8.1f} ({rate / one:.2f}x)" for name, (rate, _, _) in runs.items()))
        print(f"   fsdp push into rank 0's rollout copy: {runs['fsdp 2 ranks'][2] * 1e3:.1f} ms/iteration;"
              "   last policy_loss " + " vs ".join(f"{loss:.6f}" for _, loss, _ in runs.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
