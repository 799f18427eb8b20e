"""Household learning run: from ONE SFT checkpoint, GiGPO vs GRPO vs RLOO with the same iterations, seeds
and budget, each with free generation and with acting among admissible actions; held-out success after
every iteration (evaluated in the run's own action mode); a table and a PNG.

    python benchmarks/learning.py --household --quick        # CPU size (documented below)
    python benchmarks/learning.py --household --gpu          # GPU size (model.device=cuda)
    python benchmarks/learning.py --household [--iterations N] [--seeds 0 1] [--out DIR]
                                  [--sft-checkpoint DIR] [key=value ...]

Sizes (SmolLM2-135M-Instruct, Household-PickPlace, the quickstart_cpu preset, trajectory layout):
  --quick  SFT on 48 fair-expert demonstrations, then per estimator 3 iterations x 2 tasks x 4 rollouts,
           held-out greedy success on 8 test_unseen tasks after each iteration; one seed.
  --gpu    SFT on 256 demonstrations, then 30 iterations x 16 tasks x 8 rollouts, 64 held-out tasks,
           two seeds; model.device=cuda, bf16.
Iteration 0 in the table is the SFT checkpoint itself (the same for every estimator).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ESTIMATORS = ("gigpo", "grpo", "rloo")
QUICK = {"iterations": 3, "sft": ["sft.episodes=48"],
         "rl": ["rollout.groups=2", "rollout.group_size=4", "eval.seeds=8"]}
GPU = {"iterations": 30, "sft": ["sft.episodes=256", "model.device=cuda", "model.dtype=bfloat16"],
       "rl": ["rollout.groups=16", "rollout.group_size=8", "eval.seeds=64", "model.device=cuda",
              "model.dtype=bfloat16", "train.micro_batch_size=8", "train.torch_threads=0"]}


def sft_checkpoint(out: Path, overrides: list[str]) -> tuple[str, float]:
    from agentgym.train.config import load_config
    from agentgym.train.sft.run import sft

    t = time.perf_counter()
    cfg = load_config("quickstart_cpu", [f"train.run_dir={out}", "logging.progress=false", *overrides])
    latest = out / "sft" / "latest"
    ckpt = out / "sft" / latest.read_text().strip() if latest.exists() else sft(cfg)
    return str(ckpt), time.perf_counter() - t


def rl_curve(estimator: str, seed: int, ckpt: str, iterations: int, out: Path, overrides: list[str]
             ) -> tuple[list[float], float]:
    """Held-out success after each iteration (index 0: before the first update)."""
    from agentgym.train.config import load_config
    from agentgym.train.trainer import Trainer

    run_dir = out / f"{estimator}-seed{seed}"
    cfg = load_config("quickstart_cpu", [f"model.policy=checkpoint:{ckpt}", "sft.enabled=false",
                                         f"algorithm.estimator={estimator}", f"train.iterations={iterations}",
                                         f"train.seed={seed}", f"rollout.seed_start={seed * 100_000}",
                                         "eval.every=1", f"train.run_dir={run_dir}", "logging.progress=false",
                                         *overrides])
    t = time.perf_counter()
    trainer = Trainer(cfg)
    try:
        curve = [trainer.evaluate()["eval/success"]]
        trainer.run()
    finally:
        trainer.close()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return curve + [r["eval/success"] for r in rows if "eval/success" in r], time.perf_counter() - t


def plot(curves: dict[str, list[list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, runs in curves.items():
        arr = np.array(runs)
        ax.plot(np.arange(arr.shape[1]), arr.mean(0), marker="o", label=f"{name} (mean of {len(runs)})")
    ax.set_xlabel("iteration (0 = SFT checkpoint)")
    ax.set_ylabel("held-out success (greedy)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("SmolLM2-135M on Household-PickPlace: from one SFT checkpoint")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--household", action="store_true")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the CPU size (default)")
    size.add_argument("--gpu", action="store_true", help="the GPU size")
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_learning_household"))
    parser.add_argument("--sft-checkpoint", help="start from this SFT checkpoint (e.g. the quick start's "
                                                 "runs/quickstart/train/sft/ckpt-N) instead of training one")
    parser.add_argument("--action-modes", nargs="+", default=["generate", "admissible"],
                        choices=["generate", "admissible"],
                        help="free generation and/or choosing among admissible actions (trained exactly on the "
                             "renormalised distribution); each estimator runs in each mode")
    parser.add_argument("overrides", nargs="*", help="config overrides for every RL run, e.g. rollout.groups=4")
    args = parser.parse_args(argv)
    spec = GPU if args.gpu else QUICK
    iterations = args.iterations or spec["iterations"]
    seeds = args.seeds or ([0, 1] if args.gpu else [0])
    ckpt, sft_s = (args.sft_checkpoint, 0.0) if args.sft_checkpoint else sft_checkpoint(args.out, spec["sft"])
    print(f"SFT checkpoint {ckpt} ({sft_s:.0f} s)")
    runs = [(e, m) for m in args.action_modes for e in ESTIMATORS]
    curves: dict[str, list[list[float]]] = {f"{e}/{m}": [] for e, m in runs}
    for seed in seeds:
        for e, m in runs:
            curve, seconds = rl_curve(e, seed, ckpt, iterations, args.out / m,
                                      [*spec["rl"], f"rollout.action_mode={m}", *args.overrides])
            curves[f"{e}/{m}"].append(curve)
            print(f"{e}/{m} seed {seed}: {' '.join(f'{v:.2f}' for v in curve)}  ({seconds:.0f} s)", flush=True)
    print("\nheld-out success per iteration (iteration 0 = the SFT checkpoint; same seeds and budget)")
    print("iter  " + "  ".join(f"{name:>18}" for name in curves))
    for i in range(iterations + 1):
        print(f"{i:<5} " + "  ".join(f"{sum(r[i] for r in rs) / len(rs):18.2f}" for rs in curves.values()))
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "household_success_vs_iteration.png"
    plot(curves, png)
    print(f"plot: {png}")
