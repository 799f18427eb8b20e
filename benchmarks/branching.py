"""Branch rollouts vs independent episodes on household, at a comparable budget of trained turns:
GiGPO step-group sizes and advantage variance.

    python benchmarks/branching.py                       # a 60% oracle / 40% random policy, 8 tasks
    python benchmarks/branching.py --policy checkpoint:runs/household_sft/final --tasks 16

Independent: G episodes per task (GiGPO's usual groups; step groups are the turns that meet the same
anchor by chance). Branching: one trunk per task, and from each of `--branch-turns` G continuations restored
from the trunk's state (each branch point is a group; its branch turn is an exact step group of G). The
branches' copies of their trunk's turns are left out (`trained_rows`): every trained turn counts once.
Printed per mode: trained turns, episodes, the share of trained turns in a step group of 1 (their step
advantage is 0: no signal), the mean step-group size a trained turn sits in, and the variance of GiGPO's
step and total advantages over trained turns. Held-out success after training on each is NOT measured here
(training on branches: `rollout.branching`, measured by benchmarks/branching_learning.py).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

HOUSEHOLD = "agentgym/Household-v0"


def table_of(trajectories):
    from agentgym.engine.branching import trained_rows
    from agentgym.trajectory import TurnTable

    full = TurnTable.from_trajectories(trajectories)
    keep = trained_rows(full)
    # the prefix rows go: returns from a branch turn on depend on later turns only, and a prefix's rewards are
    # one constant across its branch group, so the group-normalised advantages are unchanged by dropping them
    return TurnTable(full.group[keep], full.traj[keep], full.turn[keep], full.anchor[keep], full.reward[keep],
                     full.valid[keep], None if full.terminated is None else full.terminated[keep])


def figures(name: str, trajectories, seconds: float) -> None:
    from agentgym.train.estimators.advantages import gigpo_parts

    table = table_of(trajectories)
    key = table.group.astype(np.int64) * (int(table.anchor.max()) + 1) + table.anchor
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    sizes = counts[inverse]
    a_episode, a_step = gigpo_parts(table, gamma=0.95)
    print(f"{name:<12s} {len(table):>8,d} {len(trajectories):>9,d} {np.mean(sizes == 1):>13.1%} "
          f"{sizes.mean():>10.2f} {a_step.var():>10.3f} {(a_episode + a_step).var():>10.3f} {seconds:>8.1f}")


def mixed_policy(share: float):
    """A policy that succeeds sometimes, so returns vary: the oracle's command or a random admissible one."""
    import random

    from agentgym.chat import ChatFormat
    from agentgym.policies.scripted import ScriptedPolicy

    rng = random.Random(0)

    def act(context):
        oracle = context.env.unwrapped.oracle_action() if rng.random() < share else None
        return oracle or rng.choice(list(context.info.get("admissible_actions") or ["look"]))
    return ScriptedPolicy(act), ChatFormat.simple()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="mixed", help="a policy spec, or mixed (default): the oracle's "
                        "command with probability --oracle-share, else a random admissible one")
    parser.add_argument("--oracle-share", type=float, default=0.6)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--G", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--branch-turns", default="2,5,8", help="comma-separated turn indices to branch from")
    args = parser.parse_args(argv)
    from agentgym.engine.branching import BranchConfig, branch_rollout
    from agentgym.eval.runner import load_eval_policy
    from agentgym.engine.rollout import RolloutConfig, rollout

    policy, chat = mixed_policy(args.oracle_share) if args.policy == "mixed" else load_eval_policy(args.policy)
    config = RolloutConfig(max_turns=args.max_turns, executor="thread")
    seeds = list(range(1000, 1000 + args.tasks))
    turns = tuple(int(t) for t in args.branch_turns.split(","))
    print(f"household, policy {args.policy}, {args.tasks} tasks, G={args.G}, max_turns={args.max_turns}, "
          f"branching from turns {turns}")
    print(f"{'mode':<12s} {'trained':>8s} {'episodes':>9s} {'step group 1':>13s} {'mean size':>10s} "
          f"{'var A_step':>10s} {'var A':>10s} {'seconds':>8s}")
    t0 = time.perf_counter()
    branched = branch_rollout(HOUSEHOLD, policy, chat, seeds, BranchConfig(turns=turns, G=args.G), config)
    figures("branching", branched, time.perf_counter() - t0)
    budget = len(table_of(branched))
    t0 = time.perf_counter()
    independent: list = []
    while sum(len(t.turns) for t in independent) < budget:   # the same trained-turn budget, whole groups of G
        group = len(independent) // args.G
        independent += rollout(HOUSEHOLD, policy, chat, [seeds[group % len(seeds)]], args.G, config,
                               start_group_id=group)
    figures("independent", independent, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
