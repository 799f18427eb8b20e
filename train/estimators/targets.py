"""Per-token training targets from per-turn advantages (or a critic's values), in shifted positions.

A turn's advantage goes to every action token of that turn. Turn-level GAE reads the critic at the
position just before each turn's first action token (the state acted from) and trains it there only;
bi-level GAE reads and trains it at every action token. The built-in estimators register here, in
train/estimators/__init__.py's registry, which config validation, the CLI and the trainer read.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from agentgym.train.estimators import advantages as A
from agentgym.train.algorithm import AlgorithmSection
from agentgym.train.estimators import get_estimator
from agentgym.train.batch import Sample, Scored, Targets
from agentgym.trajectory import Trajectory, TurnTable


def anchor_texts(trajectories: Sequence[Trajectory]) -> list[str]:
    """Text of each anchor code, coded as `TurnTable.from_columns` codes them (first appearance)."""
    codes: dict[Any, int] = {}
    for t in trajectories:
        for k in t.turns:
            codes.setdefault(k.anchor, len(codes))
    return [a if isinstance(a, str) else repr(a) for a in codes]


# ------------------------------------------------------------------------------ reward and loss shaping

def overlong_penalties(lengths: np.ndarray, max_tokens: int, buffer: int, penalty: float) -> np.ndarray:
    """DAPO's soft overlong punishment: 0 up to `max_tokens - buffer` tokens, then rising linearly to
    `penalty` at `max_tokens` (with buffer 0: `penalty` exactly for responses cut at the limit)."""
    start = max_tokens - buffer
    ramp = (np.asarray(lengths, dtype=np.float64) - start) / max(buffer, 1)
    return penalty * np.clip(np.where(np.asarray(lengths) >= max_tokens, 1.0, ramp), 0.0, 1.0)


def turn_column(trajectories: Sequence[Trajectory], fn: Callable[[Any], Any]) -> np.ndarray:
    """One value per turn in `TurnTable.from_trajectories` row order."""
    return np.array([fn(k) for t in trajectories for k in t.turns])


def shape_rewards(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory], max_tokens: int
                  ) -> TurnTable:
    """The table with overlong penalties subtracted from turn rewards (algorithm.shaping.overlong=penalty)."""
    if cfg.shaping.overlong != "penalty" or not len(table):
        return table
    lengths = turn_column(trajectories, lambda k: len(k.response_ids))
    shaping = cfg.shaping
    reward = table.reward - overlong_penalties(lengths, max_tokens, shaping.overlong_buffer, shaping.overlong_penalty)
    return replace(table, reward=reward)  # [n] rows; the terminated and shared columns kept


def _reward_penalty(cfg: AlgorithmSection) -> float:
    return cfg.shaping.invalid_penalty if cfg.shaping.invalid_penalty_mode == "reward" else 0.0


def _advantage_penalty(cfg: AlgorithmSection, table: TurnTable) -> np.ndarray:
    """Per-turn penalty subtracted from the offending turn's advantage only (invalid_penalty_mode=advantage)."""
    if cfg.shaping.invalid_penalty_mode != "advantage" or not cfg.shaping.invalid_penalty:
        return np.zeros(len(table))
    return cfg.shaping.invalid_penalty * (~table.valid & A.trained(table))  # [n]: a branch's copies pay it in the trunk


def truncated_is_weights(trainer_logprobs: np.ndarray, sampler_logprobs: np.ndarray, mask: np.ndarray,
                         cap: float) -> np.ndarray:
    """min(π_trainer / π_sampler, cap) per position (1 off `mask` and where the sampler gave no log-prob):
    truncated importance sampling for a sampler whose kernels or precision differ from the trainer's."""
    known = mask & np.isfinite(sampler_logprobs)
    diff = np.where(known, trainer_logprobs - np.nan_to_num(sampler_logprobs), 0.0)
    return np.exp(np.minimum(diff, np.log(cap)))


def _loss_extras(cfg: AlgorithmSection, samples: Sequence[Sample], scored: Scored, overlong: np.ndarray | None
                 ) -> dict[str, list[np.ndarray] | None]:
    """The actor-loss mask (overlong=mask) and the TIS weights of each sample."""
    extras: dict[str, list[np.ndarray] | None] = {"loss_mask": None, "is_weights": None}
    if cfg.shaping.overlong == "mask" and overlong is not None:
        extras["loss_mask"] = [((s.row[1:] >= 0) & ~overlong[np.maximum(s.row[1:], 0)]).astype(np.float64)
                               for s in samples]
    if cfg.loss.tis_cap is not None:
        extras["is_weights"] = [truncated_is_weights(o, s.rollout_logprobs[1:], s.row[1:] >= 0, cfg.loss.tis_cap)
                                for o, s in zip(scored.old_logprobs, samples)]
    return extras


def whiten(advantages: list[np.ndarray], segs: list[np.ndarray]) -> list[np.ndarray]:
    """Advantages normalised to mean 0, std 1 over all action positions of the batch."""
    values = np.concatenate([a[r >= 0] for a, r in zip(advantages, segs)]) if advantages else np.zeros(0)
    if values.size < 2:
        return advantages
    mean, std = values.mean(), values.std()
    return [np.where(r >= 0, (a - mean) / (std + 1e-8), 0.0) for a, r in zip(advantages, segs)]


# ------------------------------------------------------------------------------ critic-free estimators

def gigpo_turns(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory], penalty: float
           ) -> np.ndarray:
    texts = anchor_texts(trajectories) if cfg.gigpo.similarity is not None else None
    return A.gigpo(table, cfg.gamma, cfg.gigpo.step_weight, cfg.norm, cfg.eps, episode_stats=cfg.episode_stats,
                   anchor_text=texts, similarity=cfg.gigpo.similarity, invalid_penalty=penalty)


def hgpo_turns(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory], penalty: float
          ) -> np.ndarray:
    codes = A.history_level_codes([k.history for t in trajectories for k in t.turns], cfg.hgpo.levels)
    return A.hgpo(table, codes, cfg.gamma, cfg.gigpo.step_weight, cfg.norm, cfg.eps, invalid_penalty=penalty,
                  episode_stats=cfg.episode_stats, alpha=cfg.hgpo.alpha)


def grpo_turns(cfg: AlgorithmSection, table: TurnTable, _: Sequence[Trajectory], penalty: float) -> np.ndarray:
    return A.grpo(table, cfg.norm, cfg.eps, episode_stats=cfg.episode_stats, invalid_penalty=penalty)


def rloo_turns(cfg: AlgorithmSection, table: TurnTable, _: Sequence[Trajectory], penalty: float) -> np.ndarray:
    return A.rloo(table, invalid_penalty=penalty)


def reinforce_pp_turns(cfg: AlgorithmSection, table: TurnTable, _: Sequence[Trajectory], penalty: float) -> np.ndarray:
    return A.reinforce_pp(table, cfg.gamma, eps=cfg.eps, invalid_penalty=penalty)


def turn_advantages(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory]) -> np.ndarray:
    """Per-turn advantages of the critic-free estimators, negatives scaled by algorithm.negative_scale."""
    return A.scale_negatives(_estimator_turn_advantages(cfg, table, trajectories), cfg.negative_scale)


def _estimator_turn_advantages(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory]
                               ) -> np.ndarray:
    estimator = get_estimator(cfg.estimator)
    if estimator.turn_advantages is None:
        raise ValueError(f"{cfg.estimator} needs a critic; use build_targets")
    adv = estimator.turn_advantages(cfg, table, trajectories, _reward_penalty(cfg))
    return adv - _advantage_penalty(cfg, table)


# ------------------------------------------------------------------------------ builders

def _critic_free_targets(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory],
                         segs: list[np.ndarray], scored: Scored, final_values: np.ndarray | None) -> Targets:
    return _spread(_estimator_turn_advantages(cfg, table, trajectories), segs)


def _spread(adv_turn: np.ndarray, segs: list[np.ndarray]) -> Targets:
    """Each turn's advantage on every one of its action tokens."""
    return Targets([np.where(r >= 0, adv_turn[np.maximum(r, 0)], 0.0) for r in segs], None, None, segs)


def _first_positions(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(turn rows, shifted position of each turn's first action token) in one sample."""
    pos = np.flatnonzero(rows >= 0)
    turns, first = np.unique(rows[pos], return_index=True)
    return turns, pos[first]


def turn_gae_targets(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory],
                      segs: list[np.ndarray], scored: Scored, final_values: np.ndarray | None) -> Targets:
    values = np.zeros(len(table))
    for rows, v in zip(segs, scored.old_values):
        turns, first = _first_positions(rows)
        values[turns] = v[first]
    adv, ret = A.turn_gae(table, values, cfg.gamma, cfg.gae.lam, _reward_penalty(cfg), final_values)
    adv = adv - _advantage_penalty(cfg, table)
    advantages, returns, vmask = [], [], []
    for rows in segs:
        advantages.append(np.where(rows >= 0, adv[np.maximum(rows, 0)], 0.0))
        turns, first = _first_positions(rows)
        r, m = np.zeros(len(rows)), np.zeros(len(rows))
        r[first], m[first] = ret[turns], 1.0
        returns.append(r)
        vmask.append(m)
    return Targets(whiten(advantages, segs) if cfg.gae.whiten_advantages else advantages, returns, vmask, segs)


def bi_level_targets(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory],
                      segs: list[np.ndarray], scored: Scored, final_values: np.ndarray | None) -> Targets:
    where = [np.flatnonzero(rows >= 0) for rows in segs]
    token_row = np.concatenate([rows[w] for rows, w in zip(segs, where)]) if segs else np.zeros(0, np.int64)
    token_val = np.concatenate([v[w] for v, w in zip(scored.old_values, where)]) if segs else np.zeros(0)
    order = np.argsort(token_row, kind="stable")  # table rows are (traj, turn) ordered; positions stay in order
    adv_sorted, ret_sorted = A.bi_level_gae(table, token_row[order], token_val[order], cfg.gamma, cfg.gae.lam,
                                            cfg.gae.lam_token, _reward_penalty(cfg), final_values)
    adv_flat, ret_flat = np.empty(len(order)), np.empty(len(order))
    adv_flat[order], ret_flat[order] = adv_sorted, ret_sorted
    adv_flat -= _advantage_penalty(cfg, table)[token_row] if len(token_row) else 0.0
    advantages, returns, vmask, k = [], [], [], 0
    for rows, w in zip(segs, where):
        a, r, m = np.zeros(len(rows)), np.zeros(len(rows)), np.zeros(len(rows))
        a[w], r[w], m[w] = adv_flat[k:k + len(w)], ret_flat[k:k + len(w)], 1.0
        k += len(w)
        advantages.append(a)
        returns.append(r)
        vmask.append(m)
    return Targets(whiten(advantages, segs) if cfg.gae.whiten_advantages else advantages, returns, vmask, segs)


def with_epo(targets: Targets, table: TurnTable, entropy_running: float | None) -> Targets:
    """The targets with what EPO's loss needs: each position's trajectory id and the running entropy H̄."""
    traj = [np.where(r >= 0, table.traj[np.maximum(r, 0)], -1) for r in targets.segments]
    return replace(targets, traj_ids=traj, entropy_running=entropy_running)


def build_targets(cfg: AlgorithmSection, table: TurnTable, trajectories: Sequence[Trajectory],
                  samples: Sequence[Sample], scored: Scored, final_values: np.ndarray | None = None,
                  turn_adv: np.ndarray | None = None) -> Targets:
    """Per-sample targets of `cfg.estimator`; `final_values` (per table row) bootstraps GAE after a
    trajectory's last turn when it was cut off rather than terminated. `turn_adv` (per table row): the
    advantages an updater's own learner computed (ArCHer's critic), spread over each turn's tokens."""
    segs = [s.row[1:].copy() for s in samples]
    if turn_adv is not None:
        targets = _spread(turn_adv, segs)
    else:
        builder = get_estimator(cfg.estimator).targets or _critic_free_targets
        targets = builder(cfg, table, trajectories, segs, scored, final_values)
    overlong = turn_column(trajectories, lambda k: k.finish_reason == "length").astype(bool)
    extras = _loss_extras(cfg, samples, scored, overlong)
    advantages = [A.scale_negatives(a, cfg.negative_scale) for a in targets.advantages]
    return Targets(advantages, targets.returns, targets.value_mask, segs, **extras)
