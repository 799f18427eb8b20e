"""Learning run of an env family: from ONE SFT checkpoint (the family preset's fair-expert warm start), GiGPO
(vs GRPO vs RLOO vs HGPO on household) with the same iterations, seeds and budget; held-out greedy success
after each evaluated iteration, mean over seeds with the seeds' spread and a 95% interval that respects
tasks x seeds (a percentile bootstrap over the held-out tasks, every seed's outcome on a drawn task kept:
train/eval_records.task_bootstrap_interval); a table and a PNG.

    python benchmarks/learning.py --family search --quick    # another family's preset (FAMILIES below)
    python benchmarks/learning.py --household --quick        # CPU size (documented below)
    python benchmarks/learning.py --household --gpu          # GPU size (model.device=cuda)
    python benchmarks/learning.py --household [--iterations N] [--seeds 0 1 2] [--eval-every K] [--out DIR]
                                  [--estimators gigpo grpo] [--sft-checkpoint DIR] [key=value ...]
    python benchmarks/learning.py --family search --sft-checkpoint DIR --seeds 1 --out B   # a seed per process,
    python benchmarks/learning.py --family search --sft-checkpoint DIR --seeds 0 1 2 --out B --report  # then the table

Sizes (SmolLM2-135M-Instruct, Household-PickPlace, the quickstart_cpu preset, trajectory layout, acting
among admissible actions unless --action-modes says otherwise):
  --quick  SFT on 48 fair-expert demonstrations, then per estimator and seed the preset's RL stage (6
           iterations x 4 tasks x 2 rollouts at lr 5e-5); held-out greedy success on 32 test_unseen tasks of
           the SFT checkpoint, after iteration 3 and after 6; 3 seeds x gigpo/grpo (~50 min on an idle 2-core
           machine, 7-8 min a run; add rloo or hgpo with --estimators, ~25 min each).
  --gpu    SFT on 256 demonstrations, then 30 iterations x 16 tasks x 8 rollouts, 64 held-out tasks every
           5 iterations, 3 seeds; model.device=cuda, bf16. Not run to the end: on one H100 the first RL
           iteration of a SmolLM2-135M-shaped random model did not finish in 230 s, loading included (every
           episode runs to the 24-turn cap; the rollout scores one episode's turn per pass, 8 episodes at a
           time), so budget hours.
Iteration 0 is the SFT checkpoint itself: greedy evaluation of fixed held-out seeds is deterministic, so it
is evaluated once and shared by every estimator and seed (its episodes kept in OUT/MODE/sft_eval_episodes.jsonl).
Every later evaluation is also paired with it task by task: tasks newly solved and newly failed and the exact
McNemar p, per run, with the mean change and the count of significant gains. Seeds change the RL rollouts'
tasks and sampling.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentgym.eval.paired import Paired

ESTIMATORS = ("gigpo", "grpo", "rloo", "hgpo")
QUICK = {"iterations": 6, "eval_every": 3, "seeds": [0, 1, 2], "estimators": ["gigpo", "grpo"],
         "sft": ["sft.episodes=48"], "rl": ["eval.seeds=32"]}  # the preset's batch
GPU = {"iterations": 30, "eval_every": 5, "seeds": [0, 1, 2], "estimators": list(ESTIMATORS),
       "sft": ["sft.episodes=256", "model.device=cuda", "model.dtype=bfloat16"],
       "rl": ["rollout.groups=16", "rollout.group_size=8", "eval.seeds=64", "model.device=cuda",
              "model.dtype=bfloat16", "train.micro_batch_size=8", "train.torch_threads=0"]}
VARIANT = {"hgpo": ["algorithm.estimator=hgpo", "algorithm.hgpo.levels=2"]}
# family -> its CPU preset (train/configs/<preset>.yaml: env, action mode, fair-expert warm start, RL stage)
FAMILIES = {"household": "quickstart_cpu", "search": "search_cpu", "web_shop": "web_shop_cpu",
            "textworld": "textworld_cpu", "scienceworld": "scienceworld_cpu"}
# the other families' quick size: the preset's warm start and RL stage (its own iterations, evaluated halfway
# and at the end), GiGPO, 3 seeds, 64 held-out tasks (issue 47's bar); the benchmark evaluates the checkpoint
# itself, so the SFT stage does not
FAMILY_QUICK = {"iterations": None, "eval_every": None, "seeds": [0, 1, 2], "estimators": ["gigpo"],
                "sft": ["sft.evaluate=false"], "rl": ["eval.seeds=64"]}


def sft_checkpoint(out: Path, overrides: list[str], preset: str = "quickstart_cpu") -> tuple[str, float]:
    from agentgym.train.config import load_config
    from agentgym.train.sft.run import sft

    t = time.perf_counter()
    cfg = load_config(preset, [f"train.run_dir={out}", "logging.progress=false", *overrides])
    latest = out / "sft" / "latest"
    ckpt = out / "sft" / latest.read_text().strip() if latest.exists() else sft(cfg)
    return str(ckpt), time.perf_counter() - t


def rl_curve(estimator: str, seed: int, ckpt: str, iterations: int, eval_every: int, out: Path,
             overrides: list[str], preset: str = "quickstart_cpu", report: bool = False
             ) -> tuple[dict[int, float], dict[int, Paired], float, dict[int, dict]]:
    """{iteration: held-out success} at 0 (the checkpoint, evaluated once per `out` and kept in
    out/sft_eval_episodes.jsonl) and after every `eval_every` iterations and the last; each of those
    evals paired task by task with iteration 0's; the seconds; and {iteration: {task: solved}}. With `report`,
    the run already in `out` is read, not trained."""
    from agentgym.train.config import load_config
    from agentgym.train.eval_records import episode_records, read_records
    from agentgym.train.trainer import Trainer

    run_dir = out / f"{estimator}-seed{seed}"
    variant = VARIANT.get(estimator, [f"algorithm.estimator={estimator}"])
    cfg = load_config(preset, [f"model.policy=checkpoint:{ckpt}", "sft.enabled=false", *variant,
                                         f"train.iterations={iterations}", f"train.seed={seed}",
                                         f"rollout.seed_start={seed * 100_000}", f"eval.every={eval_every}",
                                         f"train.run_dir={run_dir}", "logging.progress=false", *overrides])
    start_path = out / "sft_eval_episodes.jsonl"
    # greedy on fixed seeds: the same for every estimator and seed; another checkpoint or task set is re-measured
    identity = {"checkpoint": ckpt, "split": cfg.eval.split, "seed_start": cfg.eval.seed_start,
                "seeds": cfg.eval.seeds, "temperature": cfg.eval.temperature}
    start = read_records(start_path)
    t = time.perf_counter()
    if report:
        from agentgym.train.metrics import read_metrics

        rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
        if not start or start[0].get("start") != identity or len(rows) < iterations:
            raise SystemExit(f"--report: no finished {iterations}-iteration run of seed {seed} in {run_dir} from this "
                             "checkpoint and evaluation; train it first (the same command without --report)")
        curve, paired, outcomes = read_curve(run_dir, start)  # the seconds: its rollouts and updates
        return curve, paired, sum(r.get("time/rollout", 0) + r.get("time/train", 0) for r in rows), outcomes
    trainer = Trainer(cfg)
    try:
        if not start or start[0].get("start") != identity:
            start = [{**r, "start": identity} for r in episode_records(-1, trainer.eval_episodes())]
            start_path.write_text("".join(json.dumps(r) + "\n" for r in start))
        trainer.run()
    finally:
        trainer.close()
    curve, paired, outcomes = read_curve(run_dir, start)
    return curve, paired, time.perf_counter() - t, outcomes


def read_curve(run_dir: Path, start: list[dict]) -> tuple[dict[int, float], dict[int, Paired], dict[int, dict]]:
    """A finished run's held-out success by iteration (0: the checkpoint's `start` records), each evaluation
    paired with the start, and {iteration: {task: solved}}."""
    from agentgym.train.eval_records import paired_by_iteration, read_records, solved, solved_by_iteration
    from agentgym.train.metrics import read_metrics

    curve = {0: sum(r["outcome"] == "success" for r in start) / len(start)}
    curve.update({int(r["iteration"]) + 1: r["eval/success"] for r in read_metrics(run_dir) if "eval/success" in r})
    records = read_records(run_dir / "eval_episodes.jsonl")
    paired = {row + 1: p for row, p in paired_by_iteration(start, records).items()}
    outcomes = {0: solved(start), **{row + 1: o for row, o in solved_by_iteration(records).items()}}
    return curve, paired, outcomes


def summarise(values: list[float], outcomes: list[dict]) -> tuple[float, float, float, float, float]:
    """(mean, seed min, seed max, 95% low, high) of per-seed success rates; the interval is a bootstrap over
    the held-out tasks with every seed's outcome on a drawn task kept (`outcomes`: per seed {task: solved}),
    not a pooled Wilson interval, which took the seeds' plays of one task for independent trials."""
    from agentgym.train.eval_records import task_bootstrap_interval

    low, high = task_bootstrap_interval(outcomes)
    return sum(values) / len(values), min(values), max(values), low, high


def pair_cell(p: Paired) -> str:
    return f"+{p.newly_solved}/-{p.newly_failed} (p {p.p_value:.3f})"


def print_paired(paired: dict[str, list[dict[int, Paired]]], seeds: list[int]) -> None:
    """Per run and evaluated iteration: tasks newly solved / newly failed against the SFT checkpoint on the
    same held-out tasks and the exact McNemar p; the success rates alone hide how much a run churns."""
    print("\npaired with the SFT checkpoint on the same tasks: newly solved / newly failed (exact McNemar p)")
    for name, runs in paired.items():
        for i in sorted(runs[0]):
            cells = "  ".join(f"s{seed} {pair_cell(r[i])}" for seed, r in zip(seeds, runs))
            wins = sum(r[i].p_value < 0.05 and r[i].newly_solved > r[i].newly_failed for r in runs)
            gain = sum(r[i].change_pts for r in runs) / len(runs)
            print(f"{name} it{i}: {cells}  mean {gain:+.1f} points, {wins}/{len(runs)} significant gains")


def plot(table: dict[str, dict[int, tuple[float, ...]]], path: Path, title: str = "Household-PickPlace") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, points in table.items():
        xs = sorted(points)
        mean = [points[x][0] for x in xs]
        ax.plot(xs, mean, marker="o", label=name)
        ax.fill_between(xs, [points[x][3] for x in xs], [points[x][4] for x in xs], alpha=0.15)
    ax.set_xlabel("iteration (0 = SFT checkpoint)")
    ax.set_ylabel("held-out success (greedy), mean over seeds")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"SmolLM2-135M on {title}: from one SFT checkpoint\n(band: 95% bootstrap over tasks, seeds kept)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--household", action="store_true", help="= --family household")
    parser.add_argument("--family", choices=sorted(FAMILIES), help="the family (its preset: FAMILIES)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the CPU size (default)")
    size.add_argument("--gpu", action="store_true", help="the GPU size")
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--eval-every", type=int, help="held-out evaluation every K iterations (and the last)")
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--estimators", nargs="+", choices=ESTIMATORS)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_learning_household"))
    parser.add_argument("--sft-checkpoint", help="start from this SFT checkpoint (e.g. the quick start's "
                                                 "runs/quickstart/train/sft/ckpt-N) instead of training one")
    parser.add_argument("--action-modes", nargs="+", choices=["generate", "admissible"],
                        help="choosing among admissible actions (trained exactly on the renormalised distribution; "
                             "household's default) and/or free generation; each estimator runs in each mode "
                             "(default: the preset's rollout.action_mode)")
    parser.add_argument("--report", action="store_true", help="train nothing: the table of runs already in --out "
                        "(seeds trained in separate processes, each with its own --seeds)")
    parser.add_argument("overrides", nargs="*", help="config overrides for every RL run, e.g. rollout.groups=4")
    args = parser.parse_args(argv)
    if args.report and not args.sft_checkpoint:  # else it would train the warm start it must only read
        raise SystemExit("--report trains nothing: give --sft-checkpoint DIR, the checkpoint the runs started from")
    family = args.family or "household"
    preset = FAMILIES[family]
    if args.gpu and family != "household":
        raise SystemExit("--gpu is the household size only; for another family give its sizes as overrides")
    spec = GPU if args.gpu else QUICK if family == "household" else FAMILY_QUICK
    from agentgym.train.config import load_config

    if args.action_modes is None:
        args.action_modes = [load_config(preset).rollout.action_mode]
    if args.out == parser.get_default("out") and family != "household":
        args.out = Path(f"runs/bench_learning_{family}")
    iterations = args.iterations or spec["iterations"] or load_config(preset).train.iterations
    eval_every = min(args.eval_every or spec["eval_every"] or max(1, iterations // 2), iterations)
    seeds, estimators = args.seeds or spec["seeds"], args.estimators or spec["estimators"]
    ckpt, sft_s = (args.sft_checkpoint, 0.0) if args.sft_checkpoint else sft_checkpoint(args.out, spec["sft"], preset)
    print(f"SFT checkpoint {ckpt} ({sft_s:.0f} s)")
    episodes = int(next(o for o in [*spec["rl"], *args.overrides][::-1] if o.startswith("eval.seeds=")).split("=")[1])
    curves: dict[str, list[dict[int, float]]] = {}
    paired: dict[str, list[dict[int, Paired]]] = {}
    solved: dict[str, list[dict[int, dict]]] = {}
    for seed in seeds:
        for m in args.action_modes:
            for e in estimators:
                curve, vs_sft, seconds, outcomes = rl_curve(e, seed, ckpt, iterations, eval_every, args.out / m,
                                                            [*spec["rl"], f"rollout.action_mode={m}",
                                                             *args.overrides], preset, args.report)
                curves.setdefault(f"{e}/{m}", []).append(curve)
                solved.setdefault(f"{e}/{m}", []).append(outcomes)
                paired.setdefault(f"{e}/{m}", []).append(vs_sft)
                print(f"{e}/{m} seed {seed}: " + " ".join(f"it{i}={v:.2f}" for i, v in sorted(curve.items()))
                      + "  vs SFT " + " ".join(f"it{i} {pair_cell(p)}" for i, p in sorted(vs_sft.items()))
                      + f"  ({seconds:.0f} s)", flush=True)
    table = {name: {i: summarise([c[i] for c in runs], [o[i] for o in solved[name]]) for i in runs[0]}
             for name, runs in curves.items()}
    print(f"\n{family} ({preset}): held-out greedy success on {episodes} tasks per evaluation, {len(seeds)} seed(s): "
          "mean [seed min-max] (95% bootstrap over tasks, seeds kept); iteration 0 = the SFT checkpoint")
    print(f"{'iter':<5}" + "".join(f"{name:>34}" for name in table))
    for i in sorted(next(iter(table.values()))):
        print(f"{i:<5}" + "".join(f"{'%.3f [%.2f-%.2f] (%.2f-%.2f)' % table[n][i]:>34}" for n in table))
    print_paired(paired, seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / f"{family}_success_vs_iteration.png"
    plot(table, png, {"household": "Household-PickPlace"}.get(family, f"{family} ({load_preset_env(preset)})"))
    print(f"plot: {png}")


def load_preset_env(preset: str) -> str:
    from agentgym.train.config import load_config

    return load_config(preset).rollout.env.removeprefix("agentgym/")
