"""The frozen trunk's output, kept from the rollout's own scoring passes, so the choice update runs only the
trainable top layers (train/updaters/choice_ppo.py) instead of recomputing the trunk once per episode.

While an `AdmissiblePolicy` with `keep_trunk` scores a turn, a pre-hook on the first trainable decoder layer
(policies/trunk.py `trainable_start`) catches the hidden states entering it for that pass's row: the prompt
tokens the prefix store did not hold, then the turn's candidate tree. The prompt part is appended to the
prefix-store entry's own (so a later turn, or another episode of the task, extends it: `CachedSequence.hidden`),
the tree part is kept per (prompt, candidates). A hidden state at that layer depends only on the tokens it
sees (causal mask, tree mask), so the update's row - the final prompt, then every turn's tree, laid out by
`turns_block` in the same order - is these pieces concatenated; they equal a fresh trunk pass up to
summation order (tests/train/test_rollout_trunk.py measures it).

A piece is valid for the trunk weights it was computed with: the store keeps their stamp and `row` refuses
(returns None, so the caller recomputes) when the weights below the trainable block changed since, when the
first trainable layer moved, or when a piece is missing (an evicted prefix, a turn scored without capture).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence


class RolloutTrunk:
    """Hidden states entering the first trainable layer, captured while scoring (see the module docstring)."""

    def __init__(self) -> None:
        self.trees: dict[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], Any] = {}
        self.stamp: tuple[tuple[int, int], ...] | None = None
        self.start = 0
        self.rows_served = 0
        self.rows_refused = 0

    def clear(self) -> None:
        self.trees.clear()

    @contextlib.contextmanager
    def capture(self, model: Any) -> Iterator[list[Any]]:
        """Yields a list that receives the [1, Q, d] input of the first trainable layer during the forward
        (empty when nothing is frozen). Records the trunk's stamp; a changed trunk drops older pieces."""
        from agentgym.policies.candidate_block import decoder_and_head
        from agentgym.policies.trunk import trainable_start, trunk_stamp

        caught: list[Any] = []
        start = trainable_start(model)
        decoder, _ = decoder_and_head(model)
        if start == 0 or start >= len(decoder.layers):
            yield caught
            return
        stamp = trunk_stamp(model, start)
        if (stamp, start) != (self.stamp, self.start):
            self.trees.clear()
            self.stamp, self.start = stamp, start

        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            caught.append((args[0] if args else kwargs["hidden_states"]).detach())

        handle = decoder.layers[start].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield caught
        finally:
            handle.remove()

    def keep_tree(self, prompt: Sequence[int], candidates: Sequence[Sequence[int]], tree: Any) -> None:
        self.trees[(tuple(prompt), tuple(tuple(c) for c in candidates))] = tree.clone()

    def row(self, model: Any, prompt_hidden: Any, ids: Sequence[int],
            turns: Sequence[tuple[int, Sequence[Sequence[int]]]]) -> Any:
        """A TrunkHidden for the row turns_block(0, ids, turns), from `prompt_hidden` (the prefix store's
        [n >= len(ids), d] hidden states of `ids`) and each turn's kept tree; None (refused) when the trunk
        changed since capture or a piece is missing."""
        import torch

        from agentgym.policies.candidate_block import turns_block
        from agentgym.policies.trunk import TrunkHidden, trainable_start, trunk_stamp

        start = trainable_start(model)
        fresh = self.stamp is not None and start == self.start and trunk_stamp(model, start) == self.stamp
        trees = [self.trees.get((tuple(ids[:n]), tuple(tuple(c) for c in cands))) for n, cands in turns]
        kept = [t for t in trees if t is not None]
        if not fresh or self.stamp is None or prompt_hidden is None or prompt_hidden.shape[0] < len(ids) \
                or len(kept) < len(trees):
            self.rows_refused += 1
            return None
        block = turns_block(0, ids, turns)
        hidden = torch.cat([prompt_hidden[:len(ids)], *kept], dim=0)
        if hidden.shape[0] != len(block.ids):
            self.rows_refused += 1
            return None
        self.rows_served += 1
        return TrunkHidden(hidden[None], start, self.stamp, tuple(int(i) for i in block.ids))
