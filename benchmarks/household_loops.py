"""How much household agents loop: revisited states in evaluated episodes, and in the fair expert's.

    python benchmarks/household_loops.py runs/quickstart/eval-sft runs/quickstart/eval-rl [--min-revisits 4]
    python benchmarks/household_loops.py --expert 200

Each eval dir's `trajectories.jsonl` is replayed in a fresh `HouseholdEnv(revisit_penalty=1)` from its
`task_id`; a turn counts as a revisit when its command leaves the world in a state it was already in that
episode (the env's `revisit` reward component). Prints, per run: success, the revisit share of all turns,
how many failures revisit at least `--min-revisits` times (the loops that eat the turn limit), the episodes
that ever take an object of another type than the task's ("wrong takes"), and where each failure stopped:
the task's object never seen, seen but never taken, or taken but not delivered (the env's subgoals).
`--expert N` plays the fair expert on N tasks of every type as the reference (it should never revisit).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def replay_revisits(task_id: str, actions: list[str]) -> int:
    """Revisits in one episode: its actions replayed from the task's first state."""
    return replay(task_id, actions)["revisits"]


def replay(task_id: str, actions: list[str]) -> dict[str, int]:
    """One episode's actions replayed from the task's first state: revisits, takes of an object that is not of
    the task's type, and whether the task's object was ever seen ("found") and held ("picked")."""
    from agentgym.envs.household import oracle
    from agentgym.envs.household.env import HouseholdEnv

    env = HouseholdEnv(revisit_penalty=1.0, wrong_take_penalty=1.0)  # the env's own components tell them
    env.reset(options={"task_id": task_id})
    stats = {"revisits": 0, "wrong_takes": 0, "found": 0, "picked": 0}
    reached: set[str] = set()
    for action in actions:
        components = env.step(action)[4]["reward_components"]
        stats["revisits"] += "revisit" in components
        stats["wrong_takes"] += "wrong_take" in components
        reached |= oracle.subgoals(env.world)
    stats["found"], stats["picked"] = int("found" in reached), int("picked" in reached)
    return stats


def run_row(eval_dir: Path, min_revisits: int) -> str:
    from agentgym.eval.runner import TRAJECTORIES_FILE, load_records

    episodes = [r.trajectory for r in load_records(eval_dir / TRAJECTORIES_FILE)]
    episodes = [t for t in episodes if str(t.task_id or "").startswith("household/")]
    if not episodes:
        return f"{eval_dir}: no household episodes"
    turns = revisits = loopy_failures = wrong = unseen = untaken = undelivered = 0
    for t in episodes:
        actions = [turn.action for turn in t.turns]
        stats = replay(t.task_id, actions)
        turns, revisits = turns + len(actions), revisits + stats["revisits"]
        wrong += stats["wrong_takes"] > 0
        if not t.success:
            loopy_failures += stats["revisits"] >= min_revisits
            unseen += not stats["found"]
            untaken += stats["found"] and not stats["picked"]
            undelivered += stats["picked"]
    failures = sum(not t.success for t in episodes)
    return (f"{eval_dir}: success {len(episodes) - failures}/{len(episodes)}, revisits {revisits / max(turns, 1):.0%} "
            f"of {turns} turns, {loopy_failures} of {failures} failures revisit >= {min_revisits} times; "
            f"{wrong} episodes take a wrong object; failures: {unseen} never see the object, {untaken} see it "
            f"and never take it, {undelivered} take it and do not deliver it")


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
