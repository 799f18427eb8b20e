"""What the eval harness costs on top of the rollouts themselves, and what resuming saves.

Side by side in one process, alternating rounds so a busy machine slows both alike:
  bare     `agentgym.engine.rollout.rollout` over the same envs x seeds x samples (no log, no reports)
  eval     `run_eval` on the same work: resume log (one flushed JSON line per episode), metrics,
           results.json, report.md, report.html
  resume   `run_eval` again on the finished OUT dir: nothing to roll out, reports rewritten
The oracle policy keeps the model out of the picture, so the figures are the harness's own; an oracle
episode takes about a millisecond, so the ratio eval/bare overstates what a model run sees (one
SmolLM2 turn on a CPU takes ~0.1-1 s). Target: (eval - bare) <= 2 ms per episode. Resume makes no
policy call (checked); its time is re-reading the log and re-rendering the reports.

    python benchmarks/eval_overhead.py                       # household suite if registered, else toy
    python benchmarks/eval_overhead.py --suite toy --episodes 20 --samples 4 --rounds 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    import agentgym
    from agentgym.eval.runner import EvalConfig, run_eval
    from agentgym.eval.suites import resolve_envs
    from agentgym.policies.scripted import OraclePolicy
    from agentgym.engine.rollout import RolloutConfig, rollout

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="household" if "household" in agentgym.list_suites() else "toy")
    parser.add_argument("--split", default=None, help="default: test_unseen for household, else test")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    name, entries = resolve_envs(suite_name=args.suite)
    split = args.split or ("test_unseen" if args.suite == "household" else "test")
    policy = OraclePolicy()
    seeds = [1_000_000 + i for i in range(args.episodes)]
    n_eps = len(entries) * args.episodes * args.samples
    times: dict[str, list[float]] = {"bare": [], "eval": [], "resume": []}
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            t0 = time.perf_counter()
            for e in entries:
                rollout(e.env_id, policy, None, seeds, group_size=args.samples, env_kwargs=dict(e.kwargs),
                        config=RolloutConfig(env_workers=args.workers), reset_options={"split": split})
            times["bare"].append(time.perf_counter() - t0)

            cfg = EvalConfig(policy="oracle", entries=tuple(entries), out_dir=os.path.join(tmp, f"r{r}"), suite=name,
                             episodes=args.episodes, samples=args.samples, workers=args.workers, split=split)
            t0 = time.perf_counter()
            run = run_eval(cfg, policy=policy, progress=False)
            times["eval"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            again = run_eval(cfg, policy=None, progress=False)
            times["resume"].append(time.perf_counter() - t0)
            assert again.ran_now == 0 and len(again.records) == n_eps
            assert all(rec.trajectory.success for rec in run.records), "the oracle should solve every task"
            sizes = {k: os.path.getsize(p) for k, p in run.paths.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"suite {name}: {len(entries)} envs x {args.episodes} tasks x {args.samples} samples = {n_eps} episodes, "
          f"oracle policy, {args.workers} env workers, median of {args.rounds} rounds")
    for k in ("bare", "eval", "resume"):
        print(f"  {k:7s} {med[k]:7.3f} s   {n_eps / med[k]:8.1f} episodes/s")
    per_ep_ms = 1000 * (med["eval"] - med["bare"]) / n_eps
    print(f"  eval / bare   = {med['eval'] / med['bare']:.3f}   (oracle episodes are ~1 ms, so this ratio is a worst case)")
    print(f"  harness cost  = {per_ep_ms:.2f} ms per episode   (log + metrics + reports; target <= 2 ms)")
    print(f"  resume / eval = {med['resume'] / med['eval']:.3f}   (finished eval re-run: no rollouts, reports only)")
    print("  files: " + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
