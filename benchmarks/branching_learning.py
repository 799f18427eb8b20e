"""Independent groups vs branching vs balanced branching (rollout.branching, issue 52), from ONE household SFT
checkpoint, at about the same episode budget: held-out greedy success paired task by task with the checkpoint,
and the training-signal figures the trainer logs (signal/..., branch/...).

    python benchmarks/branching_learning.py --sft-checkpoint runs/quickstart_cpu/sft/ckpt-N [--seeds 0]
                                            [--iterations 6] [--modes independent all balanced] [key=value ...]

Per iteration (the quickstart_cpu preset, GiGPO, acting among admissible actions):
  independent  4 tasks x 2 plays (the preset's batch): 8 episodes
  all          2 tasks x 2 plays, then 2 branches from the middle (share 0.5) of one play of each group: 8
  balanced     3 tasks x 2 plays, then 2 branches from the middle of one play of each group whose plays all
               succeeded or all failed: 6 + 2 x (flat groups), about 9 at the checkpoint's pass rate
The checkpoint's own held-out eval is run once and shared (greedy on fixed seeds). Printed per run: held-out
success, newly solved / failed vs the checkpoint (exact McNemar p), episodes and turns played, the share of
groups with a non-zero advantage, the share of trained turns in a step group of size > 1, branch points and
the branches' success, and the wall and CPU time (the CPU time includes the checkpoint's eval in the run
that measures it).
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BRANCH = ["rollout.branching.shares=[0.5]", "rollout.branching.branches=2"]
MODES = {"independent": [],
         "all": ["rollout.groups=2", "rollout.branching.mode=all", *BRANCH],
         "balanced": ["rollout.groups=3", "rollout.branching.mode=balanced", *BRANCH]}


def signal_row(run_dir: Path) -> dict[str, float]:
    """Totals and means over the run's iterations of what it played and the signal it trained on."""
    from agentgym.train.metrics import read_metrics

    rows = [m for m in read_metrics(run_dir) if "success" in m]
    mean = lambda key: sum(m.get(key, 0.0) for m in rows) / len(rows)  # noqa: E731
    episodes = sum(m.get("episodes_played", m.get("episodes_trained", 0.0)) for m in rows)
    turns = sum(m.get("turns_played", m["turns"] * m.get("episodes_trained", 0.0)) for m in rows)
    return {"episodes": episodes, "turns": turns, "live_groups": mean("signal/live_group_share"),
            "step_turns": mean("signal/step_turn_share"), "points": sum(m.get("branch/points", 0.0) for m in rows),
            "branch_success": mean("branch/success"), "train_success": mean("success")}


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the machine is shared: wall time says little)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> None:
    from learning_household import rl_curve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-checkpoint", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--out", type=Path, default=Path("runs/bench_branching"))
    parser.add_argument("overrides", nargs="*", help="config overrides for every run, e.g. eval.seeds=64")
    args = parser.parse_args(argv)
    common = ["eval.seeds=64", *args.overrides]
    shared_eval = args.out / "sft_eval_episodes.jsonl"
    print(f"{'run':<16}{'held-out':>9}{'vs SFT':>22}{'episodes':>9}{'turns':>7}{'live grp':>9}{'step>1':>8}"
          f"{'points':>7}{'br succ':>8}{'s':>6}{'cpu s':>7}", flush=True)
    for seed in args.seeds:
        for mode in args.modes:
            out = args.out / mode
            out.mkdir(parents=True, exist_ok=True)
            if shared_eval.exists() and not (out / shared_eval.name).exists():
                shutil.copy(shared_eval, out / shared_eval.name)  # the checkpoint's greedy eval: measured once
            cpu = cpu_seconds()
            curve, paired, seconds, _ = rl_curve("gigpo", seed, args.sft_checkpoint, args.iterations,
                                                 args.iterations, out, [*MODES[mode], *common])
            if not shared_eval.exists():
                shutil.copy(out / shared_eval.name, shared_eval)
            last = max(curve)
            p = paired[last]
            s = signal_row(out / f"gigpo-seed{seed}")
            print(f"{mode + ' s' + str(seed):<16}{curve[last]:>9.3f}"
                  f"{f'+{p.newly_solved}/-{p.newly_failed} (p {p.p_value:.3f})':>22}{s['episodes']:>9.0f}"
                  f"{s['turns']:>7.0f}{s['live_groups']:>9.2f}{s['step_turns']:>8.2f}{s['points']:>7.0f}"
                  f"{s['branch_success']:>8.2f}{seconds:>6.0f}{cpu_seconds() - cpu:>7.0f}", flush=True)
            with open(args.out / "results.jsonl", "a") as f:
                f.write(json.dumps({"mode": mode, "seed": seed, "sft": curve[0], "held_out": curve[last],
                                    "newly_solved": p.newly_solved, "newly_failed": p.newly_failed,
                                    "p": p.p_value, "seconds": seconds, "cpu_seconds": cpu_seconds() - cpu,
                                    **s}) + "\n")
    print(f"iteration 0 (the checkpoint): {curve[0]:.3f}")


if __name__ == "__main__":
    main()
