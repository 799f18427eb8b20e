"""ArCHer's utterance-level critic maths (Zhou et al., 2024, "ArCHer: Training Language Model Agents via
Hierarchical Multi-Turn RL"), as pure functions over per-turn arrays.

A turn k acts from state s_k (its prompt) with action a_k (its whole response) and earns r_k; s_{k+1} is the
next turn's prompt. The critic has two Q heads and two V heads; the target critic is a slowly moving copy.

    y_Q(k) = r_k + γ · min(V'_1, V'_2)(s_{k+1})      V' from the target critic
             r_k                                      when turn k terminated the episode (no future)
    a turn cut off by the turn limit or a full context is *truncated*, not terminal: it bootstraps from
    V'(s_{k+1}) like any other turn, s_{k+1} being the prompt the next turn would have had.

    y_V(k) = min(Q'_1, Q'_2)(s_k, a_k)                 Q' from the target critic, on the buffer's action
    (the paper's code draws a fresh a ~ π(s_k) for this target; on a CPU that costs a generation per
    critic step, so the stored action stands in: y_V then follows the behaviour policy of the buffer,
    which the warm-up and a bounded buffer keep close to π.)

    loss = Σ_i (Q_i(s_k, a_k) − y_Q)² + (V_i(s_k) − y_V)²   (mean over the mini-batch)
    θ' ← (1 − τ) θ' + τ θ                            after every critic step (Polyak)

    A(s_k, a_k) = min(Q_1, Q_2)(s_k, a_k) − min(V_1, V_2)(s_k)   the actor's turn advantage, given to
    every token of the turn; the token policy is trained on the current iteration's turns by
    REINFORCE with this baseline (or the PPO clip).
"""
from __future__ import annotations

import numpy as np


def q_targets(rewards: np.ndarray, next_values: np.ndarray, terminal: np.ndarray, gamma: float) -> np.ndarray:
    """y_Q = r + γ V'(s') where the turn did not end the episode, r where it did."""
    rewards = np.asarray(rewards, dtype=np.float64)
    keep = 1.0 - np.asarray(terminal, dtype=np.float64)
    return rewards + gamma * keep * np.asarray(next_values, dtype=np.float64)


def double_min(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The clipped double estimate: the smaller of two heads, element-wise."""
    return np.minimum(np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64))


def turn_advantages(q1: np.ndarray, q2: np.ndarray, v1: np.ndarray, v2: np.ndarray) -> np.ndarray:
    """A = min(Q1, Q2) − min(V1, V2), one value per turn."""
    return double_min(q1, q2) - double_min(v1, v2)


def polyak(target: np.ndarray, online: np.ndarray, tau: float) -> np.ndarray:
    """(1 − τ) · target + τ · online: the target network's soft update (τ = 1 copies, τ = 0 freezes)."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    return (1.0 - tau) * np.asarray(target, dtype=np.float64) + tau * np.asarray(online, dtype=np.float64)
