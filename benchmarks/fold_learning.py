"""Folded vs windowed context, side by side at equal compute: the tiny model on the toy key-door, same init,
same seeds, same iterations, groups and group size; only the layout differs.

    OMP_NUM_THREADS=1 python3 benchmarks/fold_learning.py [--iterations 10] [--length 4]

  step/0 : each turn's prompt is the task + the current observation (the `toy_learning` preset)
  fold   : the whole episode, folded into the model's own (one-token) summary turn once a prompt passes
           `--fold-at` tokens; the summary turns are trained like any action
Prints per iteration: training success and the trained tokens (the sum of sample lengths: what the update
costs), and each run's mean success over the last half. The key-door is fully observable, so this asks
whether training through folds learns as well as a window at the same budget, not whether memory helps.
"""
from __future__ import annotations

import argparse
from pathlib import Path

ROWS = {"step/0": ["rollout.layout=step", "rollout.history_turns=0"],
        "fold": ["rollout.layout=fold"]}


def run(name: str, extra: list[str], args: argparse.Namespace) -> list[dict]:
    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    overrides = [f"train.run_dir={Path(args.out) / name.replace('/', '_')}", f"train.iterations={args.iterations}",
                 "eval.every=0", f"rollout.env_kwargs={{length: {args.length}, key_bonus: 0.5, key_at_start: true}}",
                 f"rollout.fold_at_tokens={args.fold_at}", *extra]
    return read_metrics(train(load_config("toy_learning", overrides)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--length", type=int, default=2, help="key-door corridor length (longer: more folds)")
    p.add_argument("--fold-at", type=int, default=80, help="fold budget in tokens (the tiny tokenizer's words)")
    p.add_argument("--out", default="runs/bench_fold_learning")
    args = p.parse_args()
    results = {name: run(name, extra, args) for name, extra in ROWS.items()}
    print("| iteration | " + " | ".join(f"{n} success | {n} samples | {n} trained tokens" for n in ROWS) + " |")
    print("|---" * (1 + 3 * len(ROWS)) + "|")
    for i in range(args.iterations):
        cells = []
        for name in ROWS:
            m = results[name][i]
            trained = m["tokens_per_s/train"] * m["time/train"]  # the trainer's own count of the tokens it ran
            cells += [f"{m['success']:.2f}", f"{m['samples']:.0f}", f"{trained:.0f}"]
        print(f"| {i} | " + " | ".join(cells) + " |")
    half = args.iterations // 2
    for name, ms in results.items():
        tail = [m["success"] for m in ms[half:]]
        print(f"{name}: mean success over iterations {half}-{args.iterations - 1}: {sum(tail) / len(tail):.2f}")


if __name__ == "__main__":
    main()
