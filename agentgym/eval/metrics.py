"""Evaluation metrics as pure functions: success with a Wilson interval, unbiased pass@k, episode means.

pass@k follows Chen et al. (2021): for a task sampled n times with c successes, the chance that at least
one of k samples drawn without replacement succeeds is 1 - C(n-c, k) / C(n, k). It is computed as a
running product (no huge binomials), and averaged over tasks.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Hashable, Iterable, Sequence

from agentgym.trajectory import Trajectory, Turn


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (default 95%); (0, 1) when n is 0.

    Unlike the normal approximation it stays inside [0, 1] and is sensible at 0/n and n/n,
    which is where agent success rates often sit.
    """
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # clamp to the estimate too: at 0/n and n/n rounding would leave the bound a hair off p
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: 1 - C(n-c, k) / C(n, k), as a stable product.

    C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), which never forms a large binomial.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n (samples per task), got k={k}, n={n}")
    if n - c < k:
        return 1.0
    prob_all_fail = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_fail *= 1.0 - k / i
    return 1.0 - prob_all_fail


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float | None:
    """Mean pass@k over tasks given (n, c) per task; None when some task has fewer than k samples."""
    counts = list(counts)
    if not counts or any(n < k for n, _ in counts):
        return None
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)


def pass_ks(max_samples: int) -> list[int]:
    """The k values worth reporting for n samples per task: 1, 2, 4, ... and n itself."""
    ks, k = [], 1
    while k < max_samples:
        ks.append(k)
        k *= 2
    if max_samples >= 1:
        ks.append(max_samples)
    return ks


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


@dataclass(frozen=True)
class Metrics:
    """Everything the reports show for one env (or a whole suite, pooled)."""

    episodes: int
    tasks: int
    successes: int
    success_rate: float
    success_ci_low: float
    success_ci_high: float
    pass_at_k: dict[str, float]            # "1", "2", ... -> mean pass@k over tasks
    mean_return: float
    std_return: float
    mean_turns: float
    mean_response_tokens: float
    mean_total_tokens: float
    invalid_action_rate: float             # invalid turns / all turns
    tool_calls: int
    tool_errors: int
    tool_calls_per_episode: float
    errors: int                            # episodes that ended with an error (policy or env failure)
    end_reasons: dict[str, int]
    wall_s: float                          # summed episode wall time
    mean_episode_wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prompt_tokens(turn: Turn) -> int:
    """Prompt length of a turn, also when its ids were dropped to save space (see runner.compact)."""
    return len(turn.prompt_ids) or int(turn.info.get("prompt_tokens", 0))


def total_tokens(traj: Trajectory) -> int:
    """Length of the whole conversation: last prompt + last response (trajectory layout), else a sum."""
    if not traj.turns:
        return 0
    last = traj.turns[-1]
    if prompt_tokens(last) >= prompt_tokens(traj.turns[0]) + sum(len(t.response_ids) for t in traj.turns[:-1]):
        return prompt_tokens(last) + len(last.response_ids)
    return sum(prompt_tokens(t) + len(t.response_ids) for t in traj.turns)


def task_counts(trajectories: Sequence[Trajectory], task_keys: Sequence[Hashable] | None = None
                ) -> list[tuple[int, int]]:
    """(samples, successes) per task; a task is one seed of one env unless `task_keys` says otherwise."""
    by_task: dict[Hashable, list[bool]] = defaultdict(list)
    keys = task_keys if task_keys is not None else [(t.env_id, t.seed) for t in trajectories]
    for key, t in zip(keys, trajectories):
        by_task[key].append(t.outcome == "success")
    return [(len(v), sum(v)) for v in by_task.values()]


def compute_metrics(trajectories: Sequence[Trajectory], task_keys: Sequence[Hashable] | None = None) -> Metrics:
    """Metrics over finished trajectories (one env, or several pooled; `task_keys` as in `task_counts`)."""
    n = len(trajectories)
    successes = sum(t.outcome == "success" for t in trajectories)
    low, high = wilson_interval(successes, n)
    counts = task_counts(trajectories, task_keys)
    min_samples = min((c[0] for c in counts), default=0)
    pass_k = {str(k): v for k in pass_ks(min_samples) if (v := mean_pass_at_k(counts, k)) is not None}
    returns = [t.total_reward for t in trajectories]
    mean_ret = _mean(returns)
    std_ret = math.sqrt(_mean([(r - mean_ret) ** 2 for r in returns])) if returns else 0.0
    turns = sum(t.num_turns for t in trajectories)
    tool_calls = sum(k.tool_calls for t in trajectories for k in t.turns)
    end_reasons: dict[str, int] = defaultdict(int)
    for t in trajectories:
        end_reasons[t.end_reason] += 1
    wall = sum(t.wall_s for t in trajectories)
    return Metrics(
        episodes=n, tasks=len(counts), successes=successes, success_rate=successes / n if n else 0.0,
        success_ci_low=low, success_ci_high=high, pass_at_k=pass_k, mean_return=mean_ret, std_return=std_ret,
        mean_turns=turns / n if n else 0.0,
        mean_response_tokens=_mean([t.num_response_tokens for t in trajectories]),
        mean_total_tokens=_mean([total_tokens(t) for t in trajectories]),
        invalid_action_rate=sum(t.invalid_actions for t in trajectories) / turns if turns else 0.0,
        tool_calls=tool_calls, tool_errors=sum(k.tool_errors for t in trajectories for k in t.turns),
        tool_calls_per_episode=tool_calls / n if n else 0.0,
        errors=sum(t.outcome == "error" for t in trajectories), end_reasons=dict(sorted(end_reasons.items())),
        wall_s=wall, mean_episode_wall_s=wall / n if n else 0.0)


def macro_success(per_env: dict[str, Metrics]) -> float:
    """Mean of per-env success rates: each env counts once, however many episodes it ran."""
    return _mean([m.success_rate for m in per_env.values()])
