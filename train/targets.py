"""Per-token training targets from per-turn advantages (or a critic's values), in shifted positions.

A turn's advantage goes to every action token of that turn. Turn-level GAE reads the critic at the
position just before each turn's first action token (the state acted from) and trains it there only;
bi-level GAE reads and trains it at every action token.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from agentgym.train import advantages as A
from agentgym.train.samples import Sample
from agentgym.train.update import Scored, Targets
from agentgym.trajectory import Trajectory, TurnTable


def anchor_texts(trajectories: Sequence[Trajectory]) -> list[str]:
    """Text of each anchor code, coded as `TurnTable.from_columns` codes them (first appearance)."""
    codes: dict[Any, int] = {}
    for t in trajectories:
        for k in t.turns:
            codes.setdefault(k.anchor, len(codes))
    return [a if isinstance(a, str) else repr(a) for a in codes]


def turn_advantages(cfg: Any, table: TurnTable, trajectories: Sequence[Trajectory]) -> np.ndarray:
    """Per-turn advantages of the critic-free estimators."""
    e, kw = cfg.estimator, {"invalid_penalty": cfg.invalid_penalty}
    if e == "gigpo":
        texts = anchor_texts(trajectories) if cfg.similarity is not None else None
        return A.gigpo(table, cfg.gamma, cfg.step_weight, cfg.norm, cfg.eps, episode_stats=cfg.episode_stats,
                       anchor_text=texts, similarity=cfg.similarity, **kw)
    if e == "grpo":
        return A.grpo(table, cfg.norm, cfg.eps, episode_stats=cfg.episode_stats, **kw)
    if e == "rloo":
        return A.rloo(table, **kw)
    if e == "reinforce_pp":
        return A.reinforce_pp(table, cfg.gamma, eps=cfg.eps, **kw)
    raise ValueError(f"{e} needs a critic; use build_targets")


def _segments(samples: Sequence[Sample]) -> list[np.ndarray]:
    return [s.row[1:].copy() for s in samples]


def build_targets(cfg: Any, table: TurnTable, trajectories: Sequence[Trajectory], samples: Sequence[Sample],
                  scored: Scored) -> Targets:
    segs = _segments(samples)
    if cfg.estimator == "turn_gae":
        return _turn_gae_targets(cfg, table, segs, scored)
    if cfg.estimator == "bi_level_gae":
        return _bi_level_targets(cfg, table, segs, scored)
    adv_turn = turn_advantages(cfg, table, trajectories)
    advantages = [np.where(r >= 0, adv_turn[np.maximum(r, 0)], 0.0) for r in segs]
    return Targets(advantages, None, None, segs)


def _first_positions(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(turn rows, shifted position of each turn's first action token) in one sample."""
    pos = np.flatnonzero(rows >= 0)
    turns, first = np.unique(rows[pos], return_index=True)
    return turns, pos[first]


def _turn_gae_targets(cfg: Any, table: TurnTable, segs: list[np.ndarray], scored: Scored) -> Targets:
    values = np.zeros(len(table))
    for rows, v in zip(segs, scored.old_values):
        turns, first = _first_positions(rows)
        values[turns] = v[first]
    adv, ret = A.turn_gae(table, values, cfg.gamma, cfg.lam, cfg.invalid_penalty)
    advantages, returns, vmask = [], [], []
    for rows in segs:
        advantages.append(np.where(rows >= 0, adv[np.maximum(rows, 0)], 0.0))
        turns, first = _first_positions(rows)
        r, m = np.zeros(len(rows)), np.zeros(len(rows))
        r[first], m[first] = ret[turns], 1.0
        returns.append(r)
        vmask.append(m)
    return Targets(advantages, returns, vmask, segs)


def _bi_level_targets(cfg: Any, table: TurnTable, segs: list[np.ndarray], scored: Scored) -> Targets:
    where = [np.flatnonzero(rows >= 0) for rows in segs]
    token_row = np.concatenate([rows[w] for rows, w in zip(segs, where)]) if segs else np.zeros(0, np.int64)
    token_val = np.concatenate([v[w] for v, w in zip(scored.old_values, where)]) if segs else np.zeros(0)
    order = np.argsort(token_row, kind="stable")  # table rows are (traj, turn) ordered; positions stay in order
    adv_sorted, ret_sorted = A.bi_level_gae(table, token_row[order], token_val[order], cfg.gamma, cfg.lam,
                                            cfg.lam_token, cfg.invalid_penalty)
    adv_flat, ret_flat = np.empty(len(order)), np.empty(len(order))
    adv_flat[order], ret_flat[order] = adv_sorted, ret_sorted
    advantages, returns, vmask, k = [], [], [], 0
    for rows, w in zip(segs, where):
        a, r, m = np.zeros(len(rows)), np.zeros(len(rows)), np.zeros(len(rows))
        a[w], r[w], m[w] = adv_flat[k:k + len(w)], ret_flat[k:k + len(w)], 1.0
        k += len(w)
        advantages.append(a)
        returns.append(r)
        vmask.append(m)
    return Targets(advantages, returns, vmask, segs)
