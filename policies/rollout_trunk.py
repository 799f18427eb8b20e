"""The frozen trunk's output, kept from the rollout's own scoring passes, so the choice update runs only the
trainable top layers (train/updaters/choice_ppo.py) instead of recomputing the trunk once per episode.

While an `AdmissiblePolicy` with `keep_trunk` scores a turn, a pre-hook on the first trainable decoder layer
(policies/trunk.py `trainable_start`) catches the hidden states entering it for that pass's row: the prompt
tokens not kept yet (the pass runs them even where the prefix store holds their KV), then the turn's candidate
tree. The prompt part extends the kept prompt
it continues (so a later turn, or another episode of the task, extends it), the tree part is kept per (prompt,
candidates). A hidden state at that layer depends only on the tokens it sees (causal mask, tree mask), so the
update's row - the final prompt, then every turn's tree, laid out by `turns_block` in the same order - is these
pieces concatenated; they equal a fresh trunk pass up to summation order (tests/train/test_rollout_trunk.py).

The prompts' hidden states are kept here, apart from the prefix store's KV: a token's hidden state is one
vector (576 floats for SmolLM2-135M) where its KV is one per layer (30 x 2 x 192), so a budget that holds a few
long episodes' KV holds a whole iteration's hidden states. Kept inside the KV entries they were evicted with
them, and half of a long-episode iteration's rows (ScienceWorld, 30 turns) recomputed their trunk.

A piece is valid for the trunk weights it was computed with: the store keeps their stamp and `row` refuses
(returns None, so the caller recomputes) when the weights below the trainable block changed since, when the
first trainable layer moved, or when a piece is missing (an evicted prompt, a turn scored without capture).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:
    from agentgym.policies.kv_cache import PrefixStore

DEFAULT_PROMPT_MB = 1024.0


@dataclass
class HiddenSequence:
    """A prompt's [len, d] hidden states entering the first trainable layer (kept in a `PrefixStore`)."""

    tokens: np.ndarray
    hidden: Any

    @property
    def nbytes(self) -> int:
        return self.hidden.numel() * self.hidden.element_size()


class RolloutTrunk:
    """Hidden states entering the first trainable layer, captured while scoring (see the module docstring)."""

    def __init__(self, prompt_mb: float = DEFAULT_PROMPT_MB) -> None:
        from agentgym.policies.kv_cache import PrefixStore

        self.trees: dict[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], Any] = {}
        # the prompts' hidden states, least recently used dropped first (any covered prefix counts: min_tokens 1)
        self.prompts: PrefixStore[HiddenSequence] = PrefixStore(int(prompt_mb * 2**20), min_tokens=1)
        self.stamp: tuple[tuple[int, int], ...] | None = None
        self.start = 0
        self.rows_served = 0
        self.rows_refused = 0

    def clear(self) -> None:
        self.trees.clear()
        self.prompts.clear()

    @contextlib.contextmanager
    def capture(self, model: Any) -> Iterator[list[Any] | None]:
        """Yields a list that receives the [1, Q, d] input of the first trainable layer during the forward
        (None when nothing is frozen: no trunk). Records the trunk's stamp; a changed trunk drops older pieces."""
        from agentgym.policies.candidate_block import decoder_and_head
        from agentgym.policies.trunk import trainable_start, trunk_stamp

        caught: list[Any] = []
        start = trainable_start(model)
        decoder, _ = decoder_and_head(model)
        if start == 0 or start >= len(decoder.layers):
            yield None
            return
        stamp = trunk_stamp(model, start)
        if (stamp, start) != (self.stamp, self.start):
            self.clear()
            self.stamp, self.start = stamp, start

        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            caught.append((args[0] if args else kwargs["hidden_states"]).detach())

        handle = decoder.layers[start].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield caught
        finally:
            handle.remove()

    def covered(self, prompt: Sequence[int]) -> int:
        """How many leading tokens of `prompt` have kept hidden states (a scoring pass that captures must
        run the rest, even where the prefix store holds their KV)."""
        return self.prompts.longest(prompt)[0]

    def prompt_hidden(self, ids: Sequence[int]) -> Any:
        """The [len(ids), d] hidden states of `ids`, or None when no kept prompt covers all of them."""
        n, entry = self.prompts.longest(ids)
        return entry.hidden[:len(ids)] if entry is not None and n >= len(ids) else None

    def keep_prompt(self, prompt: Sequence[int], past: int, tail: Any) -> None:
        """Keep `prompt`'s hidden states: a kept prompt's for its first `past` tokens, then `tail` (this pass's,
        [len(prompt) - past, d]); the store drops kept prompts it extends. Nothing is kept when the first
        `past` are not held (the row will be refused and recomputed)."""
        import torch

        if past:
            head = self.prompt_hidden(prompt[:past])
            if head is None:
                return
            hidden = torch.cat([head, tail], dim=0)
        else:
            hidden = tail.clone()  # not a view: the caught row also holds the candidate tree
        self.prompts.add(HiddenSequence(np.asarray(prompt, dtype=np.int64), hidden))

    def keep_tree(self, prompt: Sequence[int], candidates: Sequence[Sequence[int]], tree: Any) -> None:
        self.trees[(tuple(prompt), tuple(tuple(c) for c in candidates))] = tree.clone()

    def row(self, model: Any, ids: Sequence[int], turns: Sequence[tuple[int, Sequence[Sequence[int]]]]) -> Any:
        """A TrunkHidden for the row turns_block(0, ids, turns), from the kept hidden states of `ids` and each
        turn's kept tree; None (refused) when the trunk changed since capture or a piece is missing."""
        import torch

        from agentgym.policies.candidate_block import turns_block
        from agentgym.policies.trunk import TrunkHidden, trainable_start, trunk_stamp

        start = trainable_start(model)
        fresh = self.stamp is not None and start == self.start and trunk_stamp(model, start) == self.stamp
        prompt_hidden = self.prompt_hidden(ids) if fresh else None
        trees = [self.trees.get((tuple(ids[:n]), tuple(tuple(c) for c in cands))) for n, cands in turns]
        kept = [t for t in trees if t is not None]
        if not fresh or self.stamp is None or prompt_hidden is None or len(kept) < len(trees):
            self.rows_refused += 1
            return None
        block = turns_block(0, ids, turns)
        hidden = torch.cat([prompt_hidden, *kept], dim=0)
        if hidden.shape[0] != len(block.ids):
            self.rows_refused += 1
            return None
        self.rows_served += 1
        return TrunkHidden(hidden[None], start, self.stamp, tuple(int(i) for i in block.ids))

