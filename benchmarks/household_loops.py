"""How much household agents loop: revisited states in evaluated episodes, and in the fair expert's.

    python benchmarks/household_loops.py runs/quickstart/eval-sft runs/quickstart/eval-rl [--min-revisits 4]
    python benchmarks/household_loops.py --expert 200

Each eval dir's `trajectories.jsonl` is replayed in a fresh `HouseholdEnv(revisit_penalty=1)` from its
`task_id`; a turn counts as a revisit when its command leaves the world in a state it was already in that
episode (the env's `revisit` reward component). Prints, per run: success, the revisit share of all turns,
and how many failures revisit at least `--min-revisits` times (the loops that eat the turn limit).
`--expert N` plays the fair expert on N tasks of every type as the reference (it should never revisit).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def replay_revisits(task_id: str, actions: list[str]) -> int:
    """Revisits in one episode: its actions replayed from the task's first state."""
    from agentgym.envs.household.env import HouseholdEnv

    env = HouseholdEnv(revisit_penalty=1.0)
    env.reset(options={"task_id": task_id})
    return sum("revisit" in env.step(action)[4]["reward_components"] for action in actions)


def run_row(eval_dir: Path, min_revisits: int) -> str:
    from agentgym.eval.runner import TRAJECTORIES_FILE, load_records

    episodes = [r.trajectory for r in load_records(eval_dir / TRAJECTORIES_FILE)]
    episodes = [t for t in episodes if str(t.task_id or "").startswith("household/")]
    if not episodes:
        return f"{eval_dir}: no household episodes"
    turns = revisits = loopy_failures = 0
    for t in episodes:
        actions = [turn.action for turn in t.turns]
        n = replay_revisits(t.task_id, actions)
        turns, revisits = turns + len(actions), revisits + n
        loopy_failures += (not t.success) and n >= min_revisits
    failures = sum(not t.success for t in episodes)
    return (f"{eval_dir}: success {len(episodes) - failures}/{len(episodes)}, revisits {revisits / max(turns, 1):.0%} "
            f"of {turns} turns, {loopy_failures} of {failures} failures revisit >= {min_revisits} times")


def expert_row(tasks: int) -> str:
    from agentgym.envs.household.env import HouseholdEnv

    env = HouseholdEnv(revisit_penalty=1.0)
    turns = revisits = solved = 0
    for seed in range(tasks):
        env.reset(seed=seed)
        for _ in range(100):  # the expert ends its episodes well inside this
            if (action := env.expert_action()) is None:
                break
            _, _, terminated, _, info = env.step(action)
            turns, revisits = turns + 1, revisits + ("revisit" in info["reward_components"])
            solved += terminated
    return f"fair expert: {solved}/{tasks} solved, {revisits} revisits in {turns} turns"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("eval_dirs", nargs="*", type=Path, help="agentgym eval --out directories")
    parser.add_argument("--min-revisits", type=int, default=4)
    parser.add_argument("--expert", type=int, default=0, metavar="N", help="also play the fair expert on N tasks")
    args = parser.parse_args()
    missing = [d for d in args.eval_dirs if not (d / "trajectories.jsonl").is_file()]
    if missing:
        sys.exit(f"household_loops: {missing[0]} has no trajectories.jsonl; pass agentgym eval --out directories")
    if not args.eval_dirs and not args.expert:
        sys.exit("household_loops: pass eval directories and/or --expert N")
    for d in args.eval_dirs:
        print(run_row(d, args.min_revisits))
    if args.expert:
        print(expert_row(args.expert))


if __name__ == "__main__":
    main()
