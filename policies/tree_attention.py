"""Attention for a training row (a conversation, then each turn's candidate tree) that computes only the
query-key pairs the tree mask allows, in pieces, instead of the dense [Q, Q] product.

A choice row (policies/candidate_block.py `turns_block`, past = 0) is C conversation tokens (causal among
themselves) followed by every turn's tree nodes, which see the conversation up to their turn's prompt and
their own ancestors only. A masked SDPA over the whole row computes all (C + T)^2 pairs; here the
conversation runs as a causal SDPA (the kernel skips the upper triangle) and each turn's nodes attend to
[conversation[:visible], own nodes] with the small exact mask of that piece: about a third of the pairs on
the quick start's rows. The pieces are the dense mask's allowed entries, nothing else: `tree_mask` checks
that the dense mask it is cut from has no allowed entry outside them, so the output is the dense
attention's up to floating-point summation order (tests/policies/test_tree_attention.py measures it).

    mask = tree_mask(block, dtype, device)        # None when the row does not have this shape
    hidden = run_layers(decoder, hidden, mask, position_ids, layers)     # policies/trunk.py

A `TurnsMask` does the same for a scoring pass over several episodes' turns at once (policies/admissible.py):
the row is each turn's new tokens one after the other, and each turn attends to its own cached keys and values
(its episode's earlier tokens, from the prefix store) and its own new tokens under its own mask. The projections
and MLP run over every turn's tokens together; attention never crosses turns.

Only `policies/trunk.run_layers` passes a `TreeMask` or `TurnsMask` to the layers (under
`tree_attention_enabled`, which points the model's attention at `tree_attention` while it runs); any other mask
goes to SDPA unchanged.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Iterator

NAME = "agentgym_tree"
_LOCK = threading.Lock()


@dataclass(frozen=True)
class TreeMask:
    """The pieces of a choice row's tree mask: `context` causal conversation tokens, then per turn the row
    span [start, end) of its tree nodes, how many conversation positions they see, and the additive
    [1, 1, n, visible + n] mask of that piece (0 allowed, the dtype's minimum elsewhere). A packed row's
    pieces (policies/packed_rows.py) also carry where their visible positions sit (`keys`)."""

    context: int
    spans: tuple[tuple[int, int, int], ...]
    local: tuple[Any, ...]
    length: int                          # row length (context + every tree node)
    # per span, the row ranges [a, b) of the `visible` positions it sees (packed rows, policies/packed_rows.py:
    # a branch sees its shared prefix, which may sit in several pieces); empty: each span sees [0, visible)
    keys: tuple[tuple[tuple[int, int], ...], ...] = ()


@dataclass(frozen=True)
class TurnsMask:
    """Several turns scored in one row: turn i's queries are the row's [start, end) (`spans`), they see its
    `past[i]` cached tokens - per layer keys and values [kv_heads, past_i, head_dim], or None when it has none -
    then its own new tokens, under its additive [1, 1, n_i, past_i + n_i] mask (`local`, CandidateBlock.mask).
    `fresh` receives each layer's keys and values of the whole row ([1, kv_heads, Q, head_dim], after rotary
    embeddings): the caller keeps the prompts' part in its prefix store."""

    spans: tuple[tuple[int, int], ...]
    past: tuple[tuple[Any, Any] | None, ...]
    local: tuple[Any, ...]
    fresh: dict[int, tuple[Any, Any]]


def tree_mask(block: Any, dtype: Any, device: Any = None) -> TreeMask | None:
    """Cut `block`'s dense tree mask (CandidateBlock.mask) into a TreeMask, or None when the row is not a
    past-free conversation followed by contiguous per-turn trees (then use the dense mask)."""
    import torch

    if block.past != 0:
        return None
    visible = list(block.visible)
    context = next((i for i, v in enumerate(visible) if v > 0), len(visible))
    if any(v == 0 for v in visible[context:]):
        return None
    spans, start = [], context
    for i in range(context + 1, len(visible) + 1):
        if i == len(visible) or visible[i] != visible[start]:
            spans.append((start, i, visible[start]))
            start = i
    if len({v for _, _, v in spans}) != len(spans):  # one span per turn, each turn's nodes contiguous
        return None
    dense = block.mask(dtype, device)[0, 0]
    allowed = dense == 0
    if not torch.equal(allowed[:context, :context], torch.ones(context, context, dtype=torch.bool,
                                                                device=allowed.device).tril()) \
            or allowed[:context, context:].any():
        return None
    local = []
    for s, e, vis in spans:
        rows = allowed[s:e]
        if not rows[:, :vis].all() or rows[:, vis:s].any() or rows[:, e:].any():
            return None
        local.append(torch.cat([dense[s:e, :vis], dense[s:e, s:e]], dim=1)[None, None])
    return TreeMask(context, tuple(spans), tuple(local), len(visible))


def tree_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                   scaling: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention interface: a TreeMask or TurnsMask runs in pieces, anything else goes to SDPA."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if isinstance(attention_mask, TurnsMask):
        return turns_attention(module, query, key, value, attention_mask, scaling)
    if not isinstance(attention_mask, TreeMask):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    m = attention_mask
    if query.shape[2] != m.length or key.shape[2] != m.length:
        raise ValueError(f"tree attention: the row has {query.shape[2]} queries and {key.shape[2]} keys but the "
                         f"tree mask was cut for {m.length} (a cache or another row's mask?)")
    gqa = query.shape[1] != key.shape[1]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    c = m.context
    pieces = [sdpa(query[:, :, :c], key[:, :, :c], value[:, :, :c], is_causal=True, scale=scaling,
                   enable_gqa=gqa)]
    for (s, e, vis), local, ranges in zip(m.spans, m.local, m.keys or [((0, vis),) for _, _, vis in m.spans]):
        k = torch.cat([*(key[:, :, a:b] for a, b in ranges), key[:, :, s:e]], dim=2)
        v = torch.cat([*(value[:, :, a:b] for a, b in ranges), value[:, :, s:e]], dim=2)
        pieces.append(sdpa(query[:, :, s:e], k, v, attn_mask=local, scale=scaling, enable_gqa=gqa))
    out = torch.cat(pieces, dim=2)
    return out.transpose(1, 2).contiguous(), None


def turns_attention(module: Any, query: Any, key: Any, value: Any, m: TurnsMask, scaling: float | None
                    ) -> tuple[Any, None]:
    """Each turn's queries against its cached keys and values, then its own new ones (see TurnsMask)."""
    import torch

    m.fresh[module.layer_idx] = (key, value)
    gqa = query.shape[1] != key.shape[1]
    pieces = []
    for (s, e), past, local in zip(m.spans, m.past, m.local):
        k, v = key[:, :, s:e], value[:, :, s:e]
        if past is not None:
            k = torch.cat([past[0][module.layer_idx][None], k], dim=2)
            v = torch.cat([past[1][module.layer_idx][None], v], dim=2)
        pieces.append(torch.nn.functional.scaled_dot_product_attention(query[:, :, s:e], k, v, attn_mask=local,
                                                                       scale=scaling, enable_gqa=gqa))
    return torch.cat(pieces, dim=2).transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, tree_attention)


@contextlib.contextmanager
def tree_attention_enabled(config: Any) -> Iterator[None]:
    """Point `config`'s attention at `tree_attention` for the duration (the forward; autograd keeps the ops
    it recorded for backward). Serialised: the setting is per model config."""
    with _LOCK:
        _register()
        before = config._attn_implementation
        config._attn_implementation = NAME
        try:
            yield
        finally:
            config._attn_implementation = before
