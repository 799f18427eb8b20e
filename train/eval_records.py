"""Per-task records of a training run's periodic evaluations, and the paired change between two of them.

An eval's success rate alone cannot say whether an iteration changed anything: the same held-out seeds are
played at every eval, so the tasks newly solved and newly failed since the previous eval (and the exact
McNemar p of that difference; agentgym.eval.paired, which also pairs runs on the compare page) are what tell
a real change from noise.
run_dir/eval_episodes.jsonl keeps one line per evaluated episode so any two evals can be compared later.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from agentgym.eval.paired import Paired, paired_outcomes
from agentgym.trajectory import Trajectory

EVAL_EPISODES = "eval_episodes.jsonl"


def episode_records(iteration: int, trajectories: Sequence[Trajectory]) -> list[dict[str, Any]]:
    """One record per evaluated episode; `iteration` is the metrics.jsonl row the eval belongs to."""
    return [{"iteration": iteration, "env": t.env_id, "seed": t.seed, "task_id": t.task_id,
             "outcome": t.outcome, "return": t.total_reward, "turns": t.num_turns, "end": t.end_reason}
            for t in trajectories]


def paired_change(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Tasks solved now but not at the previous eval and the reverse, over the tasks both evals played
    (an episode that errored counts as unsolved), with the exact McNemar p of the difference."""
    p = paired_outcomes("previous eval", "this eval", _solved(before), _solved(after))
    return {"eval/newly_solved": float(p.newly_solved), "eval/newly_failed": float(p.newly_failed),
            "eval/paired_p": p.p_value}


def paired_by_iteration(start: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]) -> dict[int, Paired]:
    """Each eval in `records` (keyed by its metrics row) paired task by task with `start`, e.g. the
    checkpoint a run started from: what the run as a whole, not its last iteration, newly solved and failed."""
    rows = sorted({r["iteration"] for r in records})
    return {row: paired_outcomes("start", f"row {row}", _solved(start),
                                 _solved([r for r in records if r["iteration"] == row])) for row in rows}


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of an eval_episodes.jsonl (none when it is missing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def solved(records: Sequence[dict[str, Any]]) -> dict[tuple[str, int], bool]:
    """{(env, seed): solved} of one eval's records (an errored episode counts as unsolved)."""
    return {(r["env"], r["seed"]): r["outcome"] == "success" for r in records}


_solved = solved


def solved_by_iteration(records: Sequence[dict[str, Any]]) -> dict[int, dict[tuple[str, int], bool]]:
    """{metrics row: {(env, seed): solved}} of every eval in an eval_episodes.jsonl's records."""
    return {row: solved([r for r in records if r["iteration"] == row]) for row in sorted({r["iteration"] for r in records})}


def task_bootstrap_interval(runs: Sequence[Mapping[Any, bool]], level: float = 0.95, resamples: int = 4000,
                            seed: int = 0) -> tuple[float, float]:
    """Interval of the mean success of several runs (training seeds) on the same held-out tasks that respects
    tasks x seeds: a percentile bootstrap over tasks with every seed kept (a drawn task brings all the runs'
    outcomes on it). The runs' plays of one task are not independent trials (an easy task is solved by every
    seed), so pooling them as seeds x tasks Bernoulli draws, as a pooled Wilson interval does, is too narrow.
    Only tasks every run played count; (nan, nan) when there is none."""
    import numpy as np

    keys = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    if not keys:
        return float("nan"), float("nan")
    per_task = np.array([[bool(r[k]) for k in keys] for r in runs], dtype=float).mean(axis=0)
    draws = np.random.default_rng(seed).integers(0, len(keys), size=(resamples, len(keys)))
    means = per_task[draws].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def append_records(run_dir: Path, records: Sequence[dict[str, Any]]) -> None:
    from agentgym.train.metrics import append_lines  # a full disk: one line, no torn record

    append_lines(run_dir / EVAL_EPISODES, [json.dumps(r) for r in records])


def last_eval(run_dir: Path) -> list[dict[str, Any]]:
    """The records of the latest eval in run_dir (none yet: []), e.g. to pair the next eval after a resume."""
    records = read_records(run_dir / EVAL_EPISODES)
    latest = max((r["iteration"] for r in records), default=None)
    return [r for r in records if r["iteration"] == latest]
