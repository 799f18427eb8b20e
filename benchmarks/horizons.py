"""How long is each task's gold path, and what turn limit does that give?

    python benchmarks/horizons.py                                   # every measured family, print the table
    python benchmarks/horizons.py --family ScienceWorld --episodes 5
    python benchmarks/horizons.py --family ScienceWorld --episodes 0 --write  # every variation (~1 h)
    python benchmarks/horizons.py --family Household Toy --write    # store the lengths in agentgym/gold_paths.json
    python benchmarks/horizons.py --stored --family ScienceWorld     # the stored lengths and limits, as Markdown

For each built-in id with an oracle: plays the oracle (no turn limit, up to --cap turns) on seeds 0..N-1 of
every split the family has, and counts its turns; ScienceWorld reads the simulator's own gold action sequence of
--episodes variations per split instead (spread evenly over the split; 0: every variation), a reload each
and no stepping. A ScienceWorld gold path's length varies with the variation (a block on sandpaper slides for
~700 turns of "look at", on steel for ~35), so its stored lengths cover every variation. Prints,
per id, the gold-path length distribution (shortest / median / 90th percentile / longest), the limit the margin
rule gives (agentgym.horizon.limit_for), the registered limit and where it came from. `--write` replaces the
measured ids' rows of agentgym/gold_paths.json, which the registrations read (tests/test_long_horizon.py checks
that no registered limit is below the rule's). Episodes the oracle does not solve are counted and printed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, replace
from typing import Any, Callable

# family -> (ids' prefix, reset splits, episodes a split)
FAMILIES: dict[str, tuple[str, tuple[str | None, ...], int]] = {
    "Toy": ("agentgym/Toy-", (None,), 100),
    "Household": ("agentgym/Household-", ("train", "test_seen", "test_unseen"), 100),
    "Search": ("agentgym/Search-", ("train", "test"), 100),
    "WebShop": ("agentgym/WebShop-v0", ("train", "test"), 50),
    "TextWorld": ("agentgym/TextWorld-", (None,), 10),
    "SWE": ("agentgym/SWE-", ("train", "test"), 10),
    "MCP": ("agentgym/MCP-", (None,), 20),
    "ScienceWorld": ("agentgym/ScienceWorld-", ("train", "dev", "test"), 5),
}
UNMEASURED = {  # ids of a family that have no gold path of their own to measure
    "agentgym/TextWorld-Game-v0": "plays a game file the user names",
    "agentgym/SWE-Mini-Bwrap-v0": "the same tasks as SWE-Mini-v0 in another sandbox",
    "agentgym/WebShop-Browser-v0": "the same shop as WebShop-v0 in a browser (two browser actions a text one)",
}


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def play_oracle(env: Any, seed: int, split: str | None, cap: int) -> tuple[int, bool]:
    """Turns the oracle takes on one episode (unlimited up to `cap`), and whether it solved it."""
    env.reset(seed=seed, options={"split": split} if split else None)
    info: dict[str, Any] = {}
    for turn in range(1, cap + 1):
        action = env.unwrapped.oracle_action()
        if action is None:
            return turn - 1, False
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return turn, bool(info.get("success"))
    return cap, False


def measure_oracle(env_id: str, splits: tuple[str | None, ...], episodes: int, cap: int) -> tuple[list[int], int, str]:
    import agentgym

    env = agentgym.make(env_id, max_turns=cap)
    lengths, failed = [], 0
    try:
        for split in splits:
            for seed in range(episodes):
                turns, solved = play_oracle(env, seed, split, cap)
                if solved:
                    lengths.append(turns)
                else:
                    failed += 1
    finally:
        env.close()
    where = ", ".join(s or "default" for s in splits)
    return lengths, failed, f"oracle episodes (seeds 0-{episodes - 1} of split {where})"


def measure_scienceworld(env_id: str, splits: tuple[str | None, ...], per_split: int, cap: int) -> tuple[list[int], int, str]:
    """The simulator's gold action sequence lengths on `per_split` variations of each split, spread evenly
    (0: all of them)."""
    import agentgym
    from agentgym.envs.scienceworld.env import ScienceWorldEnv, seed_simulator

    task = agentgym.spec(env_id).kwargs["task"]

    env = ScienceWorldEnv(task=task)
    lengths = []
    try:
        for split in splits:
            pool = env.variations(split)
            picked = pool if per_split == 0 else sorted(
                {pool[round(i * (len(pool) - 1) / max(1, per_split - 1))] for i in range(per_split)})
            for variation in picked:
                sim = env._simulator()
                seed_simulator(sim, variation)
                sim.server.load(task, variation, "", True)
                env._loaded = (variation, True)
                lengths.append(len(list(sim.server.getGoldActionSequence())))
    finally:
        env.close()
    each = "all variations" if per_split == 0 else f"{per_split} variations"
    return lengths, 0, f"gold action sequences ({each} of each of {', '.join(map(str, splits))})"


def measure(env_id: str, family: str, episodes: int, cap: int) -> tuple[list[int], int, str]:
    _, splits, _ = FAMILIES[family]
    how: Callable[..., tuple[list[int], int, str]] = measure_scienceworld if family == "ScienceWorld" else measure_oracle
    return how(env_id, splits, episodes, cap)


def family_ids(family: str) -> list[str]:
    import agentgym

    prefix = FAMILIES[family][0]
    return [e for e in agentgym.list_envs(prefix) if e not in UNMEASURED]


def print_stored(families: list[str], only: list[str]) -> None:
    """gold_paths.json's rows of `families` as a Markdown table, with the limits they give and where each
    registered limit came from."""
    import agentgym
    from agentgym.horizon import gold_paths, limit_for, limit_source

    print("| env id | measured | gold path min / median / max | rule: max + max(2, 50%) | registered limit |")
    print("|---|---|---|---|---|")
    for family in families:
        for env_id in family_ids(family):
            row = gold_paths(env_id)
            if row is None or (only and env_id not in only):
                continue
            limit = agentgym.spec(env_id).max_episode_steps
            budget = "" if limit == limit_for(row.longest) else f": {limit_source(env_id).split(';')[0].split(': ', 1)[-1]}"
            print(f"| {env_id.removeprefix('agentgym/')} | {row.episodes} {row.measured.split(' (')[0]} | "
                  f"{row.shortest} / {row.median:g} / {row.longest} | {limit_for(row.longest)} | {limit}{budget} |")


def write_rows(rows: dict[str, Any], keep_longest: bool = False) -> None:
    from agentgym.horizon import GOLD_PATHS_FILE

    data = json.loads(GOLD_PATHS_FILE.read_text())
    for env_id, row in rows.items():
        old = data["ids"].get(env_id)
        if keep_longest and old and old["longest"] > row.longest:  # ScienceWorld: a variation's gold path varies
            # from run to run (boiling and freezing times), so a re-measure never lowers a limit below a path seen
            row = replace(row, longest=old["longest"],
                          measured=f"{row.measured}; longest {old['longest']} from an earlier measurement")
        data["ids"][env_id] = asdict(row)
    data["ids"] = dict(sorted(data["ids"].items()))
    GOLD_PATHS_FILE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {', '.join(rows)} to {GOLD_PATHS_FILE}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from agentgym.horizon import GOLD_PATHS_FILE, GoldPaths, gold_paths, limit_for, limit_source

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", nargs="*", default=[f for f in FAMILIES if f not in ("ScienceWorld", "SWE")],
                        choices=list(FAMILIES), help="families to measure (default: the fast ones)")
    parser.add_argument("--env", nargs="*", default=[], help="only these ids")
    parser.add_argument("--episodes", type=int, default=None, help="episodes a split (ScienceWorld: variations, 0 = all)")
    parser.add_argument("--cap", type=int, default=1000, help="give up on an oracle episode after this many turns")
    parser.add_argument("--write", action="store_true", help=f"store the lengths in {GOLD_PATHS_FILE}")
    parser.add_argument("--stored", action="store_true", help="measure nothing: print the stored lengths, the "
                                                              "rule's limit and the registered one as a Markdown table")
    args = parser.parse_args(argv)
    if args.episodes is not None and (args.episodes < 0 or args.episodes == 0 and args.family != ["ScienceWorld"]):
        parser.error("--episodes must be >= 1 (0, every variation, only with --family ScienceWorld alone)")
    import agentgym

    if args.stored:
        print_stored(args.family, args.env)
        return 0

    rows: dict[str, GoldPaths] = {}
    header = f"{'env id':56s} {'n':>4s} {'min':>4s} {'med':>6s} {'p90':>4s} {'max':>4s} {'rule':>5s} {'limit':>5s}  unsolved"
    print(header)
    for family in args.family:
        ids = [e for e in family_ids(family) if not args.env or e in args.env]
        episodes = FAMILIES[family][2] if args.episodes is None else args.episodes
        for env_id in ids:
            started = time.perf_counter()
            try:
                lengths, failed, how = measure(env_id, family, episodes, args.cap)
            except Exception as exc:  # a family whose dependency (Docker, a browser) is missing here
                print(f"{env_id:56s} not measured: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                continue
            if not lengths:
                print(f"{env_id:56s} the oracle solved none of {failed} episodes", flush=True)
                continue
            row = GoldPaths(episodes=len(lengths), shortest=min(lengths), median=statistics.median(lengths),
                            longest=max(lengths), measured=how)
            rows[env_id] = row
            limit = agentgym.spec(env_id).max_episode_steps
            print(f"{env_id:56s} {len(lengths):4d} {row.shortest:4d} {row.median:6g} {percentile(lengths, 0.9):4d} "
                  f"{row.longest:4d} {limit_for(row.longest):5d} {limit or 0:5d}  {failed}"
                  f"  ({time.perf_counter() - started:.0f} s)", flush=True)
            old = gold_paths(env_id)
            if old is not None and old.longest != row.longest:
                print(f"  {env_id}: longest gold path was {old.longest} in {GOLD_PATHS_FILE.name}, now {row.longest}")
            if limit is not None and limit < limit_for(row.longest):
                print(f"  {env_id}: registered limit {limit} is below the rule's {limit_for(row.longest)} "
                      f"({limit_source(env_id) or 'not from agentgym.horizon.turn_limit'})")
            if args.write:  # row by row: a long run stopped half-way keeps what it measured
                write_rows({env_id: row}, keep_longest=family == "ScienceWorld")
    return 0


if __name__ == "__main__":
    sys.exit(main())
