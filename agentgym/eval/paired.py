"""Paired comparison of two eval runs on the same tasks: which tasks the second newly solves and newly
fails, and the exact McNemar test of whether the difference is more than chance.

Two checkpoints evaluated on the same seeds play the same tasks, so comparing their success rates as two
independent samples wastes that pairing: most tasks are solved by both or by neither and say nothing
about the change. McNemar's test looks only at the discordant tasks: under "no difference" each of them is
as likely to favour either run, so the count that favours the second run is Binomial(n, 1/2), n = the
discordant tasks. The two-sided exact p-value is min(1, 2 P(X <= min(b, c))), b and c the two counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence, TypeVar

Key = TypeVar("Key", bound=Hashable)  # a task's identity: (env, seed, sample), (env, seed), ...


@dataclass(frozen=True)
class Paired:
    first: str
    second: str
    tasks: int            # episodes present in both runs (same env, seed and sample)
    both: int
    neither: int
    newly_solved: int     # solved by the second only
    newly_failed: int     # solved by the first only
    p_value: float        # exact two-sided McNemar

    @property
    def change_pts(self) -> float:
        return 100.0 * (self.newly_solved - self.newly_failed) / self.tasks if self.tasks else 0.0


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for b and c discordant pairs (1.0 when there are none)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def outcomes(results: dict[str, Any]) -> dict[tuple[str, int, int], bool]:
    """{(env, seed, sample): success} of one run's results.json."""
    return {(r["env"], int(r["seed"]), int(r["sample"])): bool(r["trajectory"]["success"])
            for r in results.get("trajectories", [])}


def paired(first: tuple[str, dict[str, Any]], second: tuple[str, dict[str, Any]]) -> Paired:
    """The paired comparison of two named runs over the episodes they share."""
    return paired_outcomes(first[0], second[0], outcomes(first[1]), outcomes(second[1]))


def paired_outcomes(first: str, second: str, a: Mapping[Key, bool], b: Mapping[Key, bool]) -> Paired:
    """The paired comparison of two {task key: solved} maps over the keys both have."""
    keys = a.keys() & b.keys()
    both = sum(a[k] and b[k] for k in keys)
    neither = sum(not a[k] and not b[k] for k in keys)
    gained = sum(b[k] and not a[k] for k in keys)
    lost = sum(a[k] and not b[k] for k in keys)
    return Paired(first, second, len(keys), both, neither, gained, lost, mcnemar_exact(gained, lost))


def paired_rows(named: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """One row per consecutive pair of runs (base -> SFT, SFT -> RL, ...)."""
    header = ["runs", "tasks", "both / neither", "newly solved / failed", "change", "McNemar p"]
    rows = []
    for first, second in zip(named, named[1:]):
        p = paired(first, second)
        rows.append([f"{p.first} → {p.second}", str(p.tasks), f"{p.both} / {p.neither}",
                     f"{p.newly_solved} / {p.newly_failed}", f"{p.change_pts:+.1f} pts", f"{p.p_value:.3g}"])
    return header, rows


def summary_lines(named: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """A console summary: each run's success with its Wilson 95% interval, then each consecutive pair's
    newly solved / newly failed tasks and exact McNemar p (what the later run added, and whether it is
    more than chance)."""
    from agentgym.eval.metrics import wilson_interval

    width = max(len(n) for n, _ in named)
    lines = []
    for name, results in named:
        o = outcomes(results)
        k, n = sum(o.values()), len(o)
        low, high = wilson_interval(k, n) if n else (0.0, 1.0)
        lines.append(f"{name:<{width}}  {k:>3}/{n:<3} = {100 * k / max(n, 1):5.1f}%  "
                     f"(Wilson 95%: {100 * low:.1f}-{100 * high:.1f}%)")
    for first, second in zip(named, named[1:]):
        p = paired(first, second)
        lines.append(f"{p.first} -> {p.second}: {p.tasks} shared tasks, newly solved {p.newly_solved}, newly failed "
                     f"{p.newly_failed} ({p.change_pts:+.1f} pts), exact McNemar p = {p.p_value:.3g}")
    return lines
