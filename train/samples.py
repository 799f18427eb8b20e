"""From trajectories to training samples: token ids, the action-token mask and each token's turn.

`trajectory` layout: one sample per episode, the last turn's prompt + response (which holds the whole
conversation); turn k's response sits at [len(turn_k.prompt_ids), + len(response)). `step` layout:
one sample per turn, its prompt + response. `fold` layout: one sample per fold segment (`agentgym.engine.layouts`),
each like a trajectory sample, so a fold's summary turn is trained in the segment it was generated in. Only
response tokens are trained on (the mask), so
observation and template tokens never enter a loss. Rows index the `TurnTable` built from the same
trajectories (`TurnTable.from_trajectories`: row = running turn count).

A branch's copies of its trunk's turns (`Trajectory.shared_prefix`, agentgym/engine/branching.py) are trained
once, in the trunk: in a branch's sample they are context (row -1, like an observation), and the step layout
makes no sample of them.
"""
from __future__ import annotations

import random
from typing import Any, Sequence

import numpy as np

from agentgym.chat import ChatFormat
from agentgym.errors import TokenMismatchError
from agentgym.engine.layouts import fold_segments, layout_messages
from agentgym.trajectory import Trajectory
from agentgym.train.batch import Batch, Sample


def _row_offsets(trajectories: Sequence[Trajectory]) -> list[int]:
    offsets, n = [], 0
    for t in trajectories:
        offsets.append(n)
        n += len(t.turns)
    return offsets


def _logprob_array(turn, n: int) -> np.ndarray:
    lp = np.zeros(n)
    k = min(n, len(turn.logprobs))
    lp[:k] = turn.logprobs[:k]
    return lp


def build_samples(trajectories: Sequence[Trajectory], layout: str) -> list[Sample]:
    """Training samples of the given layout; raises TokenMismatchError if a trajectory-layout turn's
    prompt is not the previous prompt + response prefix (the token-in-token-out invariant)."""
    samples: list[Sample] = []
    for traj, offset in zip(trajectories, _row_offsets(trajectories)):
        turns = [t for t in traj.turns if t.response_ids]
        if not turns or all(t.index < traj.shared_prefix for t in turns):
            continue
        if layout == "step":
            for t in (t for t in turns if t.index >= traj.shared_prefix):
                ids = np.asarray(t.prompt_ids + t.response_ids, dtype=np.int64)
                row = np.full(len(ids), -1, dtype=np.int64)
                row[len(t.prompt_ids):] = offset + t.index
                lp = np.zeros(len(ids))
                lp[len(t.prompt_ids):] = _logprob_array(t, len(t.response_ids))
                samples.append(Sample(ids, row, lp))
        elif layout == "trajectory":
            samples.append(_trajectory_sample(traj, turns, offset))
        elif layout == "fold":
            for start, end in fold_segments(traj.turns):
                segment = [t for t in traj.turns[start:end] if t.response_ids]
                if segment:
                    samples.append(_trajectory_sample(traj, segment, offset))
        else:
            raise ValueError(f"layout must be 'trajectory', 'step' or 'fold', got {layout!r}")
    return samples


def _trajectory_sample(traj: Trajectory, turns: list, offset: int) -> Sample:
    last = turns[-1]
    ids = np.asarray(last.prompt_ids + last.response_ids, dtype=np.int64)
    row = np.full(len(ids), -1, dtype=np.int64)
    lp = np.zeros(len(ids))
    for t in turns:
        start, n = len(t.prompt_ids), len(t.response_ids)
        if start + n > len(ids) or not np.array_equal(ids[start:start + n], t.response_ids) \
                or not np.array_equal(ids[:start], t.prompt_ids):
            raise TokenMismatchError(
                f"trajectory {traj.env_id} seed {traj.seed} sample {traj.sample_index}: turn {t.index}'s prompt + "
                "response is not a prefix of the final sequence; the rollout re-tokenized something "
                "(use the trajectory layout of agentgym.engine.rollout, or train with rollout.layout=step)")
        if t.index >= traj.shared_prefix:  # a branch's copied turns stay context: trained in the trunk
            row[start:start + n] = offset + t.index
            lp[start:start + n] = _logprob_array(t, n)
    return Sample(ids, row, lp)


def collate(samples: Sequence[Sample], index: Sequence[int], pad_id: int = 0) -> Batch:
    width = max(len(samples[i]) for i in index)
    b = len(index)
    ids = np.full((b, width), pad_id, dtype=np.int64)
    att = np.zeros((b, width), dtype=np.int64)
    row = np.full((b, width), -1, dtype=np.int64)
    for k, i in enumerate(index):
        s = samples[i]
        ids[k, :len(s)] = s.ids
        att[k, :len(s)] = 1
        row[k, :len(s)] = s.row
    return Batch(ids, att, row, np.asarray(index, dtype=np.int64))


def micro_batches(samples: Sequence[Sample], index: Sequence[int], size: int) -> list[list[int]]:
    """Split `index` into micro-batches of `size`, grouping similar lengths to cut padding."""
    order = sorted(index, key=lambda i: len(samples[i]))
    return [order[k:k + size] for k in range(0, len(order), size)]


def verify_samples(chat: ChatFormat, trajectories: Sequence[Trajectory], layout: str, history_turns: int,
                   tools: Sequence[Any] | None = None, limit: int = 0, rng: random.Random | None = None
                   ) -> tuple[int, list[str]]:
    """Check that each sample's prompt ids equal the tokenisation of the conversation it renders (each
    episode's last prompt in the trajectory layout, every turn's prompt in the step layout); `limit` > 0
    checks that many samples drawn at random. Returns (samples checked, one message per mismatch)."""
    if layout == "trajectory":
        units = [(t, len(t.turns) - 1) for t in trajectories if t.turns and t.turns[0].response_ids]
    elif layout == "fold":  # the last prompt of each segment covers the segment's earlier ones
        units = [(t, end - 1) for t in trajectories for _, end in fold_segments(t.turns) if t.turns[end - 1].response_ids]
    else:
        units = [(t, k) for t in trajectories for k in range(len(t.turns)) if t.turns[k].response_ids]
    if 0 < limit < len(units):
        units = (rng or random.Random(0)).sample(units, limit)
    errors = []
    for traj, k in units:
        messages = layout_messages(chat, traj, k, layout, history_turns, tools)
        try:
            chat.verify(traj.turns[k].prompt_ids, messages, tools)
        except TokenMismatchError as exc:
            errors.append(f"{traj.env_id} seed {traj.seed} sample {traj.sample_index} turn {k}: {exc}")
    return len(units), errors
