"""The figures the run-health guardrails (guardrails.py) read, computed from an iteration's rollouts: pure
functions of trajectories (and the figures of earlier iterations), logged every iteration.

  reward_out_of_range_share    turns whose env reward lies outside the env's declared per-step range
  success_without_reward_share successful episodes whose return is <= 0
  reward_without_success_share failed episodes that earned at least the largest reward a step can give
  identical_group_share        groups (G >= 2) whose members all produced the same action texts
  response_tokens_per_turn     mean generated tokens per turn
  tool_error_share             tool calls that returned an error, of all tool calls
  zero_variance_group_share, zero_advantage_turn_share, effective_samples   what the update can learn from
  entropy_trend, response_length_trend   the mean of the last `window` iterations over the first `window`'s
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from agentgym.trajectory import Trajectory, split_groups

RewardRange = Optional[tuple[float, float]]


def reward_sanity(trajectories: Sequence[Trajectory], reward_range: RewardRange) -> dict[str, float]:
    """Shares of turns and episodes whose rewards contradict the env's declared range or its success flag.
    Read from the env's own rewards (before group rewards or shaping); episodes that failed (env error,
    timeout) are left out."""
    played = [t for t in trajectories if t.outcome != "error"]
    won = [t for t in played if t.success]
    lost = [t for t in played if not t.success]
    out = {"success_without_reward_share": _share(sum(t.total_reward <= 0 for t in won), len(won))}
    if reward_range is not None:
        lo, hi = reward_range
        rewards = [k.reward for t in played for k in t.turns]
        tol = 1e-9 * max(1.0, abs(lo), abs(hi))
        out["reward_out_of_range_share"] = _share(sum(not lo - tol <= r <= hi + tol for r in rewards), len(rewards))
        if hi > 0:
            out["reward_without_success_share"] = _share(sum(t.total_reward >= hi - tol for t in lost), len(lost))
    return out


def identical_group_share(trajectories: Sequence[Trajectory]) -> float:
    """The share of groups of two or more whose members all produced the same sequence of action texts."""
    sized = [g for g in split_groups(trajectories) if len(g) >= 2]
    return _share(sum(len({tuple(k.action for k in t.turns) for t in g}) == 1 for g in sized), len(sized))


def rollout_health(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Collapse and tool-error figures of a batch of rollouts."""
    turns = [k for t in trajectories for k in t.turns]
    calls = sum(k.tool_calls for k in turns)
    out = {"identical_group_share": identical_group_share(trajectories),
           "response_tokens_per_turn": _share(sum(len(k.response_ids) for k in turns), len(turns))}
    if calls:
        out["tool_error_share"] = sum(k.tool_errors for k in turns) / calls
    return out


def trend(values: Sequence[float], window: int) -> Optional[float]:
    """mean(last `window` values) / mean(first `window` values), once there are 2 x window values and the
    first mean is positive; None before (too early to call a trend)."""
    clean = [v for v in values if v is not None and math.isfinite(v)]
    if window < 1 or len(clean) < 2 * window:
        return None
    first = sum(clean[:window]) / window
    return None if first <= 0 else (sum(clean[-window:]) / window) / first


def signal_figures(trajectories: Sequence[Trajectory], rows: Sequence[Any], advantages: Sequence[Any]
                   ) -> dict[str, float]:
    """What the update can learn from: the share of groups (G >= 2) whose returns are all equal (zero
    advantage variance under GRPO), the share of turns whose action tokens all have a zero advantage, and the
    effective batch, the samples with some non-zero advantage (count and share). `rows[i]` and
    `advantages[i]` are sample i's action tokens' turn rows and advantages."""
    flat = [len({round(t.total_reward, 9) for t in g}) == 1 for g in split_groups(trajectories) if len(g) >= 2]
    turn_live: dict[int, bool] = {}  # turn-table row -> some action token has a non-zero advantage
    live_samples = 0
    for row, adv in zip(rows, advantages):
        nonzero = np.asarray(adv) != 0
        live_samples += bool(nonzero.any())
        for r, live in zip(np.asarray(row).tolist(), nonzero.tolist()):
            turn_live[r] = turn_live.get(r, False) or live
    return {"zero_variance_group_share": _share(sum(flat), len(flat)),
            "zero_advantage_turn_share": _share(sum(not v for v in turn_live.values()), len(turn_live)),
            "effective_samples": float(live_samples), "effective_sample_share": _share(live_samples, len(rows))}


def trends(history: Sequence[dict[str, Any]], window: int) -> dict[str, float]:
    """entropy_trend and response_length_trend over the run's iterations so far (this one included)."""
    out = {}
    for key, name in (("entropy", "entropy_trend"), ("response_tokens_per_turn", "response_length_trend")):
        ratio = trend([m[key] for m in history if key in m], window)
        if ratio is not None:
            out[name] = ratio
    if history and "success" in history[-1]:  # the collapse guard forgives a solved task its certainty
        out["recent_success"] = sum(m.get("success", 0.0) for m in history[-window:]) / len(history[-window:])
    return out


def _share(count: float, total: int) -> float:
    return float(count) / total if total else 0.0
