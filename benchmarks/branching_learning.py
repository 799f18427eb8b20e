"""Independent groups vs branching vs balanced branching (rollout.branching, issue 52), from ONE household SFT
checkpoint, at about the same episode budget: held-out greedy success paired task by task with the checkpoint,
and the training-signal figures the trainer logs (signal/..., branch/...).

    python benchmarks/branching_learning.py --sft-checkpoint DIR [--seeds 0] [--iterations 6]
                                            [--modes independent all balanced] [--out DIR] [-- key=value ...]
    # or in parallel processes: the checkpoint's eval, each mode's runs, then the table
    python benchmarks/branching_learning.py --sft-checkpoint DIR --stage start
    python benchmarks/branching_learning.py --sft-checkpoint DIR --stage train --seeds 0 1 2 --modes all \
        -- train.torch_threads=1      # `--` ends --seeds/--modes before the config overrides
    python benchmarks/branching_learning.py --sft-checkpoint DIR --stage report
    # the training signal alone: each mode's batches played from the checkpoint, no update and no eval
    python benchmarks/branching_learning.py --sft-checkpoint DIR --stage signal --iterations 2

Per iteration (the quickstart_cpu preset, GiGPO, acting among admissible actions):
  independent  4 tasks x 2 plays (the preset's batch): 8 episodes
  all          2 tasks x 2 plays, then 2 branches from the middle (share 0.5) of one play of each group: 8
  balanced     3 tasks x 2 plays, then 2 branches from the middle of one play of each group whose plays all
               succeeded or all failed: 6 + 2 x (flat groups), 10.8 an iteration measured (2.4 of 3 groups flat)
The checkpoint's held-out eval (greedy on fixed seeds: the same for every run) is measured once. Printed per
run: held-out success, newly solved / failed vs the checkpoint (exact McNemar p), episodes and turns played,
the share of groups with a non-zero advantage, the share of trained turns in a step group of size > 1,
branch points, the branch groups whose pass rate is strictly between 0 and 1, the branches' success, and the wall and CPU time of its training (its final eval included).
"""
from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

BRANCH = ["rollout.branching.shares=[0.5]", "rollout.branching.branches=2"]
MODES = {"independent": [],
         "all": ["rollout.groups=2", "rollout.branching.mode=all", *BRANCH],
         "balanced": ["rollout.groups=3", "rollout.branching.mode=balanced", *BRANCH]}
START = "sft_eval_episodes.jsonl"


def config(mode: str, seed: int, ckpt: str, iterations: int, run_dir: Path, overrides: list[str]):
    from agentgym.train.config import load_config

    return load_config("quickstart_cpu", [f"model.policy=checkpoint:{ckpt}", "sft.enabled=false",
                                          "algorithm.estimator=gigpo", f"train.iterations={iterations}",
                                          f"train.seed={seed}", f"rollout.seed_start={seed * 100_000}",
                                          f"eval.every={iterations}", f"train.run_dir={run_dir}",
                                          "logging.progress=false", "eval.seeds=64", *MODES[mode], *overrides])


def cpu_seconds() -> float:
    """CPU time of this process (the machine is shared: wall time says little)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def start_eval(ckpt: str, out: Path, overrides: list[str]) -> None:
    """The checkpoint's held-out episodes, as every run's eval plays them, into out/START."""
    from agentgym.train.eval_records import episode_records
    from agentgym.train.trainer import Trainer

    trainer = Trainer(config("independent", 0, ckpt, 1, out / "start", overrides))
    try:
        records = episode_records(-1, trainer.eval_episodes())
    finally:
        trainer.close()
    (out / START).write_text("".join(json.dumps(r) + "\n" for r in records))


def train_run(mode: str, seed: int, ckpt: str, iterations: int, out: Path, overrides: list[str]) -> None:
    from agentgym.train.trainer import train

    run_dir = out / f"{mode}-seed{seed}"
    t, cpu = time.perf_counter(), cpu_seconds()
    train(config(mode, seed, ckpt, iterations, run_dir, overrides))
    (run_dir / "cost.json").write_text(json.dumps({"seconds": time.perf_counter() - t,
                                                   "cpu_seconds": cpu_seconds() - cpu}))


def signal_at_start(modes: list[str], seed: int, ckpt: str, batches: int, out: Path, overrides: list[str]) -> None:
    """Each mode's first `batches` batches played from the checkpoint as its collector plays them (the same
    seeds), nothing trained: the signal each gives the first update. One line per batch to out/signal.jsonl."""
    from agentgym.train.estimators.signal import estimator_signal
    from agentgym.train.trainer import Trainer

    for mode in modes:
        cfg = config(mode, seed, ckpt, batches, out / f"signal-{mode}-seed{seed}", overrides)
        trainer = Trainer(cfg)
        try:
            for i in range(batches):
                t, cpu = time.perf_counter(), cpu_seconds()
                got = trainer.collector.collect(i)
                played = got.stats.get("episodes_played", float(len(got.first)))
                turns = got.stats.get("turns_played", float(sum(len(x.turns) for x in got.first)))
                row = {"mode": mode, "seed": seed, "batch": i, "episodes": played, "turns": turns,
                       "success": sum(x.success for x in got.first) / len(got.first),
                       **{k: v for k, v in got.stats.items() if k.startswith("branch/")},
                       **estimator_signal(cfg.algorithm, got.batch), "seconds": time.perf_counter() - t,
                       "cpu_seconds": cpu_seconds() - cpu}
                with open(out / "signal.jsonl", "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
        finally:
            trainer.close()


def signal_row(run_dir: Path) -> dict[str, float]:
    """Totals and means over the run's iterations of what it played and the signal it trained on."""
    from agentgym.train.metrics import read_metrics

    rows = [m for m in read_metrics(run_dir) if "success" in m]
    mean = lambda key: sum(m.get(key, 0.0) for m in rows) / len(rows)  # noqa: E731
    episodes = sum(m.get("episodes_played", m.get("episodes_trained", 0.0)) for m in rows)
    turns = sum(m.get("turns_played", m["turns"] * m.get("episodes_trained", 0.0)) for m in rows)
    return {"episodes": episodes, "turns": turns, "live_groups": mean("signal/live_group_share"),
            "step_turns": mean("signal/step_turn_share"), "points": sum(m.get("branch/points", 0.0) for m in rows),
            "branch_success": mean("branch/success"), "train_success": mean("success"),
            "informative": sum(m.get("branch/informative_groups", 0.0) for m in rows)}


def report(out: Path, modes: list[str], seeds: list[int]) -> None:
    from agentgym.train.eval_records import paired_by_iteration, read_records

    start = read_records(out / START)
    print(f"the checkpoint: {sum(r['outcome'] == 'success' for r in start)}/{len(start)} held-out")
    print(f"{'run':<16}{'held-out':>9}{'vs SFT':>22}{'episodes':>9}{'turns':>7}{'live grp':>9}{'step>1':>8}"
          f"{'points':>7}{'inform':>7}{'br succ':>8}{'s':>6}{'cpu s':>7}")
    for seed in seeds:
        for mode in modes:
            run_dir = out / f"{mode}-seed{seed}"
            records = read_records(run_dir / "eval_episodes.jsonl")
            if not records or not (run_dir / "cost.json").exists():
                print(f"{mode + ' s' + str(seed):<16} not finished")
                continue
            paired = paired_by_iteration(start, records)
            last = max(paired)
            p, s = paired[last], signal_row(run_dir)
            cost = json.loads((run_dir / "cost.json").read_text())
            solved = sum(r["outcome"] == "success" for r in records if r["iteration"] == last)
            print(f"{mode + ' s' + str(seed):<16}{f'{solved}/{p.tasks}':>9}"
                  f"{f'+{p.newly_solved}/-{p.newly_failed} (p {p.p_value:.3f})':>22}{s['episodes']:>9.0f}"
                  f"{s['turns']:>7.0f}{s['live_groups']:>9.2f}{s['step_turns']:>8.2f}{s['points']:>7.0f}{s['informative']:>7.0f}"
                  f"{s['branch_success']:>8.2f}{cost['seconds']:>6.0f}{cost['cpu_seconds']:>7.0f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-checkpoint", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--stage", choices=("all", "start", "train", "report", "signal"), default="all")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_branching"))
    parser.add_argument("overrides", nargs="*", help="config overrides for every run, e.g. train.torch_threads=1")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "signal":
        for seed in args.seeds:
            signal_at_start(args.modes, seed, args.sft_checkpoint, args.iterations, args.out, args.overrides)
        return
    if args.stage in ("all", "start") and not (args.out / START).exists():
        start_eval(args.sft_checkpoint, args.out, args.overrides)
    if args.stage in ("all", "train"):
        for seed in args.seeds:
            for mode in args.modes:
                train_run(mode, seed, args.sft_checkpoint, args.iterations, args.out, args.overrides)
    if args.stage in ("all", "report"):
        report(args.out, args.modes, args.seeds)


if __name__ == "__main__":
    main()
