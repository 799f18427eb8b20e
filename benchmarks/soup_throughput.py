"""Episodes trained per minute: one RL run on T threads against a soup of T one-thread runs played side by side
(`train.soup_runs=T`, train/soup.py), alternating in one invocation so a drifting machine load hits both.

    python benchmarks/soup_throughput.py --checkpoint runs/quickstart_cpu/sft/ckpt-36     # the quick start's RL stage
    python benchmarks/soup_throughput.py --quick                 # the toy preset's tiny model (the test)
    python benchmarks/soup_throughput.py --checkpoint CK --iterations 3 --rounds 2 -- rollout.groups=2

Each setting is `agentgym train` in a fresh process, timed from start to exit (model load, SFT-free RL stage,
checkpoint and, for the soup, the average), with episodes counted from the metrics the runs wrote (a soup's:
every member's). Prints wall seconds, episodes, episodes a minute and the soup's ratio to the one run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK = ["rollout.groups=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.every=0"]


def episodes_trained(run_dir: Path) -> float:
    """Episodes the run (or every member of a soup) trained on, from metrics.jsonl."""
    from agentgym.train.metrics import read_metrics

    folders = sorted((run_dir / "soup").glob("run-*/")) if (run_dir / "soup").is_dir() else [run_dir]
    return sum(row.get("episodes_trained", 0.0) for folder in folders for row in read_metrics(folder))


def run_setting(preset: str, overrides: list[str], run_dir: Path, threads: int) -> tuple[float, float]:
    """(wall seconds, episodes trained) of one `agentgym train` process."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "agentgym", "train", preset, *overrides, f"train.run_dir={run_dir}",
                           "logging.progress=false"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"soup_throughput: {run_dir.name} failed: {tail[0]}")
    return wall, episodes_trained(run_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", help="the warm start the RL stage starts from (quickstart_cpu's sft/ckpt-N)")
    ap.add_argument("--quick", action="store_true", help="the toy preset's tiny model, 2 iterations (seconds)")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="T: the one run's threads, the soup's member count")
    ap.add_argument("--rounds", type=int, default=1, help="times each setting runs (alternating)")
    ap.add_argument("--out", help="keep the runs here (default: a temporary folder)")
    ap.add_argument("overrides", nargs="*", help="config overrides after --, e.g. -- rollout.groups=2")
    args = ap.parse_args(argv)
    if not args.quick and not args.checkpoint:
        ap.error("pass --checkpoint (the quick start's warm start, e.g. runs/quickstart_cpu/sft/ckpt-36) or --quick")
    if args.threads < 2 or args.iterations < 1 or args.rounds < 1:
        ap.error("--threads must be >= 2 (a soup of one run is the run), --iterations and --rounds >= 1")
    if args.quick:
        preset, base = "toy_learning", [*QUICK, f"train.iterations={args.iterations}"]
    else:
        preset, base = "quickstart_cpu", ["sft.enabled=false", f"model.policy=checkpoint:{args.checkpoint}",
                                          f"train.iterations={args.iterations}"]
    base += args.overrides
    settings = {"one run": [f"train.torch_threads={args.threads}"],
                "soup": [f"train.torch_threads={args.threads}", f"train.soup_runs={args.threads}"]}
    root = Path(args.out or tempfile.mkdtemp(prefix="soup-throughput-"))
    totals = {name: [0.0, 0.0] for name in settings}
    for r in range(args.rounds):
        for name, extra in settings.items():
            wall, episodes = run_setting(preset, base + extra, root / f"{name.replace(' ', '-')}-{r}", args.threads)
            totals[name][0] += wall
            totals[name][1] += episodes
            print(f"round {r}: {name}: {wall:.1f} s, {episodes:.0f} episodes", flush=True)
    print(f"\n| setting ({args.threads} threads, {args.iterations} iterations a run) | wall s | episodes | "
          "episodes/min |\n|---|---|---|---|")
    rate = {}
    for name, (wall, episodes) in totals.items():
        rate[name] = episodes * 60 / wall
        label = f"{args.threads} one-thread runs side by side (soup)" if name == "soup" else f"one run, {args.threads} threads"
        print(f"| {label} | {wall:.1f} | {episodes:.0f} | {rate[name]:.2f} |")
    print(f"\nsoup / one run, episodes a minute: {rate['soup'] / rate['one run']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
