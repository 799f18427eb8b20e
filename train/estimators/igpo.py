"""IGPO: information-gain turn rewards, scored by teacher forcing with the update's forward pass.

For a task whose env exposes a ground-truth answer a* (`Trajectory.ground_truth`, from
info["ground_truth"] at reset), the policy's belief in a* in a context c is the mean log-probability of
a*'s tokens when the model is made to write them as its next reply, "<answer>a*</answer>":

    s(c) = (1/|a*|) Σ_j log π_θ(a*_j | c, <answer>, a*_<j)        ("logprob"; "prob": exp of it)

Turn t's intrinsic reward is how much that turn (its action and the env's answer) moved the belief:

    IG_t = s(prompt_t + response_t + next observation) − s(prompt_t)

The last turn of an episode gets 0: its reward is the outcome (and it may be the answer itself, which
would trivially raise s). The gain enters as the reward component "info_gain", added (× coef) to the
turn's reward before any estimator runs, so GiGPO, GRPO, HGPO and the GAE estimators all use it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from agentgym.chat import ChatFormat
from agentgym.trajectory import Trajectory

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


def answer_probe(chat: ChatFormat, answer: str) -> tuple[list[int], np.ndarray]:
    """(probe ids, mask of the answer's own tokens in them): "<answer>" + answer + "</answer>"."""
    head, body, tail = chat.encode(ANSWER_OPEN), chat.encode(answer), chat.encode(ANSWER_CLOSE)
    mask = np.zeros(len(head) + len(body) + len(tail), dtype=bool)
    mask[len(head):len(head) + len(body)] = True
    return [*head, *body, *tail], mask


def turn_contexts(chat: ChatFormat, traj: Trajectory) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(context before, context after) of each turn but the last, as token ids."""
    turns = traj.turns
    out = []
    for t in range(len(turns) - 1):
        k = turns[t]
        after = chat.continue_prompt(k.prompt_ids, k.response_ids, turns[t + 1].observation)
        out.append((tuple(k.prompt_ids), tuple(after)))
    return out


def gains_from_scores(before: np.ndarray, after: np.ndarray, mode: str = "logprob") -> np.ndarray:
    """IG = s(after) − s(before), on mean log-probs ("logprob") or on their exp ("prob")."""
    if mode == "prob":
        return np.exp(after) - np.exp(before)
    if mode == "logprob":
        return np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    raise ValueError(f"igpo mode must be 'logprob' or 'prob', got {mode!r}")


AnswerScores = Callable[[list[tuple[int, ...]], list[int], np.ndarray], np.ndarray]
"""(contexts, probe ids, probe mask) -> the mean log-prob of the probe's masked tokens after each context: the
model's pass, `train.updaters.token_ppo.answer_logprobs` bound to the trained model."""


def info_gains(chat: ChatFormat, trajectories: Sequence[Trajectory], answer_scores: AnswerScores,
               mode: str = "logprob") -> list[np.ndarray]:
    """IG_t per turn of each trajectory (0 for the last turn and for trajectories without a ground truth).
    Identical contexts are scored once (in the trajectory layout turn t's 'after' is turn t+1's 'before')."""
    gains = [np.zeros(len(t.turns)) for t in trajectories]
    by_answer: dict[str, list[tuple[int, int, tuple[int, ...], tuple[int, ...]]]] = {}
    for i, traj in enumerate(trajectories):
        if traj.ground_truth:
            for t, (before, after) in enumerate(turn_contexts(chat, traj)):
                by_answer.setdefault(traj.ground_truth, []).append((i, t, before, after))
    for answer, items in by_answer.items():
        probe, mask = answer_probe(chat, answer)
        unique = list(dict.fromkeys(c for _, _, b, a in items for c in (b, a)))
        scores = dict(zip(unique, answer_scores(unique, probe, mask)))
        for i, t, before, after in items:
            gains[i][t] = gains_from_scores(np.array(scores[before]), np.array(scores[after]), mode)
    return gains


def with_info_gain(trajectories: Sequence[Trajectory], gains: Sequence[np.ndarray], coef: float
                   ) -> list[Trajectory]:
    """Trajectories whose turns carry reward component "info_gain" = IG_t and reward += coef · IG_t."""
    out = []
    for traj, g in zip(trajectories, gains):
        turns = tuple(replace(k, reward=k.reward + coef * float(x),
                              reward_components={**k.reward_components, "info_gain": float(x)})
                      for k, x in zip(traj.turns, g))
        out.append(replace(traj, turns=turns))
    return out
