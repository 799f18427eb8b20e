"""GiGPO vs GRPO side by side: same tiny model init, same seeds, same budget, on the toy key-door env.

    python benchmarks/learning.py [--iterations 14] [--seeds 0 1] [--out runs/bench_learning]
    python benchmarks/learning.py --household --quick   # SmolLM2 on household from one SFT checkpoint:
                                                        # GiGPO vs GRPO (+ RLOO, HGPO: --estimators), learning_household.py
    python benchmarks/learning.py --family search --quick   # another family (search, web_shop, textworld,
                                                        # scienceworld): its *_cpu preset's warm start, then RL
                                                        # per seed, paired with the start (learning_household.py)

The env (agentgym/Toy-KeyDoor-OneWord-v0, envs/toy/oneword.py) pays 0.5 for taking the key and 1.0 for
opening the door a turn or more later, so the moves that earn the final reward come before it: turn-
level credit. Each estimator trains the same randomly initialised 2-layer Llama (word-level
tokenizer) with the `toy_learning` preset; only `algorithm.estimator` differs. Prints training
success per iteration for each run and the mean over seeds, and writes success_vs_iteration.png.
"""
from __future__ import annotations

import argparse
from pathlib import Path

ESTIMATORS = ("gigpo", "grpo")
DEFAULT_ROWS = ESTIMATORS
# #19: the turn-level credit methods beside GiGPO, as rows of the same table (`--variants`)
VARIANTS: dict[str, list[str]] = {
    "hgpo": ["algorithm.estimator=hgpo", "algorithm.hgpo.levels=2"],
    "gigpo+igpo": ["algorithm.estimator=gigpo", "algorithm.igpo.coef=0.1"],
    "gigpo+epo": ["algorithm.estimator=gigpo", "algorithm.regularisers.entropy_coef=0",
                  "algorithm.regularisers.epo_coef=0.01"],
    # #27: a critic learnt by TD: turn-level GAE (on-policy, a separate value model) and ArCHer (off-policy,
    # replay buffer; its REINFORCE actor takes one step per batch, as train/configs/toy_archer.yaml)
    "turn_gae": ["algorithm.estimator=turn_gae", "model.critic=separate", "optim.critic_lr=0.001"],
    "archer": ["algorithm.estimator=archer", "train.mini_batches=1", "optim.critic_lr=0.001",
               "algorithm.archer.critic_steps=32", "algorithm.archer.critic_batch=64"],
}
# #19: the search env at a CPU-sized setting (`--env search`): the embedded SmolLM2 (the tiny model's
# key-door vocabulary cannot read search text), 1-hop questions, short episodes
SEARCH_CPU = ["model.policy=hf:smollm2-135m-instruct", "rollout.env=agentgym/Search-1Hop-v0", "rollout.env_kwargs={}",
              "rollout.max_turns=3", "rollout.group_size=4", "rollout.groups=2", "rollout.history_turns=2",
              "rollout.keep_task=true", "rollout.max_new_tokens=48", "rollout.max_context_tokens=2048",
              "rollout.max_observation_tokens=256", "optim.lr=1.0e-5", "train.micro_batch_size=8",
              "train.torch_threads=2"]


def run(estimator: str, seed: int, iterations: int, out: Path, extra: list[str]) -> list[float]:
    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    run_dir = out / f"{estimator}-seed{seed}"
    variant = VARIANTS.get(estimator, [f"algorithm.estimator={estimator}"])
    cfg = load_config("toy_learning", [*variant, f"train.iterations={iterations}",
                                       f"train.seed={seed}", f"rollout.seed_start={seed * 100_000}", "eval.every=0",
                                       f"train.run_dir={run_dir}", "logging.progress=false", *extra])
    return [m["success"] for m in read_metrics(train(cfg))]


def episodes_per_iteration(overrides: list[str]) -> int:
    """Episodes one training iteration plays (groups x group size) under the toy preset and `overrides`."""
    from agentgym.train.config import load_config

    rollout = load_config("toy_learning", overrides).rollout
    return rollout.groups * rollout.group_size


def plot(curves: dict[str, list[list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, runs in curves.items():
        arr = np.array(runs)
        x = np.arange(arr.shape[1])
        ax.plot(x, arr.mean(0), label=f"{name} (mean of {len(runs)})")
        ax.fill_between(x, arr.min(0), arr.max(0), alpha=0.2)
    ax.set_xlabel("iteration")
    ax.set_ylabel("training success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("tiny Llama on Toy-KeyDoor-OneWord: GiGPO vs GRPO")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=14)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_learning"))
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_ROWS),
                        help=f"rows: estimators and/or {', '.join(VARIANTS)}")
    parser.add_argument("--env", choices=("toy", "search"), default="toy",
                        help="search: the search env at a CPU-sized setting with the embedded SmolLM2")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for both, e.g. rollout.groups=4")
    args = parser.parse_args()
    ESTIMATORS = tuple(args.variants)  # noqa: N806 (the table below names its rows by this)
    if args.env == "search":
        args.overrides = [*SEARCH_CPU, *args.overrides]
    curves: dict[str, list[list[float]]] = {e: [] for e in ESTIMATORS}
    for seed in args.seeds:
        for estimator in ESTIMATORS:
            curves[estimator].append(run(estimator, seed, args.iterations, args.out, args.overrides))
    print("training success per iteration (same init, seeds and budget)")
    print("iter " + "".join(f"{e}-s{s:<6}" for s in args.seeds for e in ESTIMATORS) + "  mean: " +
          "  ".join(ESTIMATORS))
    for i in range(args.iterations):
        cells = "".join(f"{curves[e][k][i]:<{len(e) + 8}.2f}" for k in range(len(args.seeds)) for e in ESTIMATORS)
        means = "  ".join(f"{sum(r[i] for r in curves[e]) / len(curves[e]):.2f}".ljust(len(e)) for e in ESTIMATORS)
        print(f"{i:<5}{cells}  mean: {means}")
    episodes = episodes_per_iteration(args.overrides)
    for e in ESTIMATORS:
        first = [next((i for i, v in enumerate(r) if v >= 0.9), None) for r in curves[e]]
        to_threshold = [None if i is None else (i + 1) * episodes for i in first]
        print(f"{e}: first iteration with success >= 0.9 per seed: {first}; episodes played by then: {to_threshold}")
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "success_vs_iteration.png"
    plot(curves, png)
    print(f"plot: {png}")


if __name__ == "__main__":
    import sys

    if any(a == "--household" or a.startswith("--family") for a in sys.argv[1:]):
        sys.path.insert(0, str(Path(__file__).parent))
        from learning_household import main as household_main

        household_main()
    else:
        main()
