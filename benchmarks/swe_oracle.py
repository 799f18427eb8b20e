"""The SWE oracle on task files, through the real rollout engine with the default eval limits.

    python benchmarks/swe_oracle.py --backend bwrap out/*/tasks.jsonl [--limit 20]

Every task runs once (`reset(options={"task_id": ...})`), with the rollout defaults the eval uses: 256 tokens a
turn, an 8,192-token context, the byte-level chat of scripted policies. Prints, per repository, tasks solved /
run and the end reasons of the others, then the first observation's largest size.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tasks", nargs="+", help="task files (JSONL from `agentgym swe make-tasks`)")
    parser.add_argument("--backend", default="bwrap", choices=("bwrap", "docker"))
    parser.add_argument("--limit", type=int, default=0, help="at most this many tasks per file (0: all)")
    args = parser.parse_args(argv)

    from agentgym.envs.swe.tasks import load_tasks
    from agentgym.eval.records import EvalConfig
    from agentgym.policies.scripted import OraclePolicy
    from agentgym.policy import SamplingParams
    from agentgym.engine.rollout import RolloutConfig, rollout

    defaults = EvalConfig.__dataclass_fields__
    config = RolloutConfig(executor="serial", max_context_tokens=defaults["max_context_tokens"].default,
                           sampling=SamplingParams(temperature=0.0, max_tokens=defaults["max_tokens"].default))
    solved: dict[str, int] = collections.Counter()
    ran: dict[str, int] = collections.Counter()
    failures: list[str] = []
    biggest = (0, "")
    start = time.perf_counter()
    for path in args.tasks:
        tasks = load_tasks(path)[: args.limit or None]
        for task in tasks:
            (traj,) = rollout("agentgym/SWE-Mini-v0", OraclePolicy(), None, [0], config=config,
                              env_kwargs={"tasks": path, "backend": args.backend, "pool_size": 1},
                              reset_options={"task_id": task.instance_id})
            ran[task.repo] += 1
            solved[task.repo] += bool(traj.success)
            biggest = max(biggest, (len(traj.first_observation), task.instance_id))
            if not traj.success:
                failures.append(f"{task.instance_id}: {traj.end_reason} {traj.error or ''}".strip())
            print(f"  {'ok  ' if traj.success else 'FAIL'} {task.instance_id} ({traj.num_turns} turns, "
                  f"first observation {len(traj.first_observation)} chars)", file=sys.stderr, flush=True)
    print(f"oracle, {args.backend}, default eval limits (max_tokens={config.sampling.max_tokens}, "
          f"max_context_tokens={config.max_context_tokens}), {time.perf_counter() - start:.0f} s:")
    for repo in sorted(ran):
        print(f"  {repo}: {solved[repo]}/{ran[repo]} solved")
    print(f"  total: {sum(solved.values())}/{sum(ran.values())} solved")
    print(f"largest first observation: {biggest[0]} characters ({biggest[1]})")
    for line in failures:
        print(f"  FAILED {line}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
