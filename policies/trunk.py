"""A decoder in two parts: the frozen trunk (every layer below the first trainable one) run once, under
no_grad, and the trainable top run on the trunk's output as often as training needs it.

With `model.train_layers: 8` of SmolLM2-135M's 30 layers, the bottom 22 layers' outputs for a token never
change while the top trains: recomputing them every SFT epoch or PPO epoch spends about half an update's
FLOPs on numbers already known. `trunk_hidden` keeps the hidden states entering the first trainable layer
(576 floats a token); `top_hidden` runs the top layers and the final norm on them. The same operations
as the decoder's own forward (the 4-D mask goes to every layer as the decoder would pass it), so values
and gradients equal the full forward (tests/policies/test_trunk.py measures it).

    trunk = trunk_hidden(model, ids, positions, mask)     # None: nothing below the top is frozen
    hidden = top_hidden(model, trunk, ids, positions, mask) if trunk else decoder(...).last_hidden_state

A cached trunk is only valid for the weights it was computed with: it carries a stamp of the trunk's
parameters (each tensor's storage and in-place version counter: an optimizer step, `load_state_dict` or
`copy_` bumps it) and `top_hidden` refuses a stale one with the cause and the fix.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from agentgym.policies.candidate_block import decoder_and_head


class StaleTrunkError(RuntimeError):
    """A cached trunk no longer matches the model (weights below the trainable block changed)."""


@dataclass(frozen=True)
class TrunkHidden:
    """The hidden states entering decoder layer `start` for one row of input ids."""

    hidden: Any                     # [1, Q, d] tensor, no grad
    start: int                      # index of the first trainable decoder layer
    stamp: tuple[tuple[int, int], ...]  # (storage address, version) of every trunk parameter
    ids: tuple[int, ...]            # the row it was computed for


def trainable_start(model: Any) -> int:
    """Index of the first decoder layer with a trainable parameter; 0 when the embeddings train, the
    decoder has no `layers`/`rotary_emb` to split (nothing to cache then)."""
    decoder, _ = decoder_and_head(model)
    layers = getattr(decoder, "layers", None)
    if layers is None or getattr(decoder, "rotary_emb", None) is None:
        return 0
    if any(p.requires_grad for p in decoder.get_input_embeddings().parameters()):
        return 0
    for i, layer in enumerate(layers):
        if any(p.requires_grad for p in layer.parameters()):
            return i
    return len(layers)


def trunk_stamp(model: Any, start: int) -> tuple[tuple[int, int], ...]:
    """(data_ptr, _version) of the embeddings' and layers[:start]'s parameters: changes whenever one of
    them is written in place or replaced."""
    decoder, _ = decoder_and_head(model)
    modules = [decoder.get_input_embeddings(), *decoder.layers[:start]]
    return tuple((p.data_ptr(), p._version) for m in modules for p in m.parameters())


def run_layers(decoder: Any, hidden: Any, mask: Any, position_ids: Any, layers: Sequence[Any]) -> Any:
    """`hidden` through `layers` as the decoder's forward runs them (rotary embeddings of `position_ids`,
    the prepared 4-D `mask` given to every layer as is). A `TreeMask` or `TurnsMask`
    (policies/tree_attention.py) runs each layer's attention in the pieces it allows instead of the dense product."""
    import contextlib

    from agentgym.policies.tree_attention import TreeMask, TurnsMask, tree_attention_enabled

    rope = decoder.rotary_emb(hidden, position_ids=position_ids)
    tree = isinstance(mask, (TreeMask, TurnsMask)) and len(layers) > 0
    with tree_attention_enabled(decoder.config) if tree else contextlib.nullcontext():
        for layer in layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=position_ids)
    return hidden


def trunk_hidden(model: Any, ids: Sequence[int], position_ids: Any, mask: Any) -> TrunkHidden | None:
    """The frozen trunk's output for one row (no grad), or None when no layer below the top is frozen."""
    import torch

    start = trainable_start(model)
    if start == 0:
        return None
    decoder, _ = decoder_and_head(model)
    with torch.no_grad():
        embeds = decoder.get_input_embeddings()(torch.tensor([list(ids)], device=position_ids.device))
        hidden = run_layers(decoder, embeds, mask, position_ids, decoder.layers[:start])
    return TrunkHidden(hidden, start, trunk_stamp(model, start), tuple(int(i) for i in ids))


def check_fresh(model: Any, trunk: TrunkHidden, ids: Sequence[int]) -> None:
    """Raise StaleTrunkError unless `trunk` was computed for `ids` with the model's current trunk."""
    start = trainable_start(model)
    if start != trunk.start:
        raise StaleTrunkError(f"the cached trunk ends at layer {trunk.start} but the model's first trainable layer "
                              f"is now {start} (train_layers changed): recompute the trunk (trunk_hidden) after "
                              "changing which layers train")
    if trunk_stamp(model, start) != trunk.stamp:
        raise StaleTrunkError(f"weights below the trainable block (embeddings or layers 0-{start - 1}) changed since "
                              "the trunk was cached: recompute it (trunk_hidden), or keep those layers frozen "
                              "(model.train_layers / sft.train_layers)")
    if tuple(int(i) for i in ids) != trunk.ids:
        raise StaleTrunkError("the cached trunk was computed for other input ids: recompute it for this row")


def top_hidden(model: Any, trunk: TrunkHidden, ids: Sequence[int], position_ids: Any, mask: Any,
               top: Any = None) -> Any:
    """The decoder's last hidden state (after the final norm) from a cached trunk: the trainable layers
    and the norm only, with gradients. `top`: another model whose top layers and norm run on `model`'s
    trunk (a KL reference); it must hold the same trunk weights (`shares_trunk`)."""
    check_fresh(model, trunk, ids)
    decoder, _ = decoder_and_head(model if top is None else top)
    hidden = run_layers(decoder, trunk.hidden, mask, position_ids, decoder.layers[trunk.start:])
    return decoder.norm(hidden)


def shares_trunk(other: Any, model: Any) -> bool:
    """Whether `other`'s embeddings and layers below `model`'s trainable block hold the same values as
    `model`'s, so that `model`'s cached trunk is `other`'s too (a reference copied before training)."""
    import torch

    start = trainable_start(model)
    mine, theirs = decoder_and_head(model)[0], decoder_and_head(other)[0]
    pairs = zip([mine.get_input_embeddings(), *mine.layers[:start]],
                [theirs.get_input_embeddings(), *theirs.layers[:start]])
    return len(theirs.layers) == len(mine.layers) and all(
        a.shape == b.shape and torch.equal(a, b)
        for m, o in pairs for a, b in zip(m.parameters(), o.parameters(), strict=True))


def forward_flops(config: Any, tokens: int, keys: int, layers: int, read: int = 0, pairs: int | None = None
                  ) -> float:
    """Forward FLOPs of `layers` decoder layers over one row of `tokens` queries attending densely to
    `keys` positions (a masked SDPA computes every pair) or to `pairs` query-key pairs in all (attention in
    pieces, policies/packed_rows.attention_pairs), plus the LM head on `read` rows: 2 per multiply-add of
    the projections and MLP, 4 * d per query-key pair (scores and the weighted sum)."""
    d, inter = config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    kv = getattr(config, "num_key_value_heads", heads) * head_dim
    per_token = 2 * (d * heads * head_dim * 2 + 2 * d * kv + 3 * d * inter)
    attention = 4 * heads * head_dim * (tokens * keys if pairs is None else pairs)
    return float(layers * (per_token * tokens + attention) + 2 * d * config.vocab_size * read)
