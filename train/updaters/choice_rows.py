"""The choice update's exact shortcuts (train/updaters/choice_ppo.py): fewer FLOPs per episode, the same
log-probs and gradients as the plain one-row-per-episode passes up to summation order.

- Packed rows (`Shortcuts.pack`): a mini-batch's episodes laid out by shared prefix (policies/packed_rows.py),
  at most `row_tokens` tokens a row: a group's plays of one task share the task prompt and every turn before
  their picks part, so those tokens run once through the trainable block, its backward and the reference.
  The trunk's hidden states are gathered from each episode's own (the rollout's, or computed once), never rerun.
- The reference is the policy (`Shortcuts.reuse_reference`): at the first update after the warm start the KL
  reference holds the trained model's very weights, so its log-probs are the policy's own, detached: its pass is
  skipped. Decided by comparing every weight when the update starts (any change since - an optimizer step,
  a load - and the pass runs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch


@dataclass(frozen=True)
class Shortcuts:
    pack: bool = True
    row_tokens: int = 6144       # a packed row's most tokens (CPU attention and the head's logits grow with it)
    reuse_reference: bool = True


PLAIN = Shortcuts(pack=False, reuse_reference=False)   # one row per episode, the reference always run


def turns_of(seq: Any) -> list[tuple[int, tuple[tuple[int, ...], ...]]]:
    return [(t.prompt_len, t.candidates) for t in seq.turns]


def own_tokens(seq: Any) -> int:
    """Tokens of `seq`'s own row (conversation + every turn's prefix-tree nodes)."""
    from agentgym.policies.candidate_block import prefix_tree

    return len(seq.ids) + sum(len(prefix_tree(c)[0]) for _, c in turns_of(seq))


def pack_groups(seqs: Sequence[Any], order: Sequence[int], row_tokens: int, min_shared: int = 1) -> list[list[int]]:
    """`order`'s sequences in rows of at most `row_tokens` tokens (estimated: their own rows, each shared
    prefix counted once): the pairs sharing the longest conversation prefix (at least `min_shared` tokens)
    join first, so a group's plays of one task end in one row before any row takes another task's play for
    the system prompt alone. Rows keep `order`'s order."""
    from agentgym.policies.packed_rows import common_prefix

    order = [int(i) for i in order]
    root = {i: i for i in order}
    size = {i: own_tokens(seqs[i]) for i in order}

    def find(i: int) -> int:
        while root[i] != i:
            i = root[i]
        return i

    pairs = sorted(((common_prefix(seqs[a].ids, seqs[b].ids), k, a, b) for k, a in enumerate(order)
                    for b in order[k + 1:]), key=lambda p: (-p[0], p[1]))
    for shared, _, a, b in pairs:
        ra, rb = find(a), find(b)
        if shared < min_shared:
            break
        if ra != rb and size[ra] + size[rb] - shared <= row_tokens:
            root[rb] = ra
            size[ra] += size[rb] - shared
    rows: dict[int, list[int]] = {}
    for i in order:
        rows.setdefault(find(i), []).append(i)
    return list(rows.values())


def packed_block(seqs: Sequence[Any], members: Sequence[int]) -> Any:
    from agentgym.policies.packed_rows import pack_rows

    return pack_rows([(seqs[i].ids, turns_of(seqs[i])) for i in members])


def packed_trunk(block: Any, trunks: Sequence[Any]) -> Any:
    """The packed row's trunk gathered from its members' own-row trunks (TrunkHidden, policies/trunk.py), or
    None when one is missing or they were computed with other weights (then the caller runs the trunk)."""
    from agentgym.policies.trunk import TrunkHidden

    if not trunks or any(t is None for t in trunks) or len({(t.start, t.stamp) for t in trunks}) != 1:
        return None
    offsets, total = [], 0
    for t in trunks:
        offsets.append(total)
        total += t.hidden.shape[1]
    index = torch.tensor([offsets[j] + k for j, k in block.sources], device=trunks[0].hidden.device)
    hidden = torch.cat([t.hidden[0] for t in trunks], dim=0).index_select(0, index)
    return TrunkHidden(hidden[None], trunks[0].start, trunks[0].stamp, tuple(block.ids))


def turn_logprobs(totals: torch.Tensor, sizes: Sequence[int], temperature: float,
                  written: Sequence[int | None]) -> list[torch.Tensor]:
    """Per turn, log π'(b) = log_softmax(s(b) / T) over its candidates' summed log-likelihoods s (as the rollout
    samples, policies/admissible.renormalised). A turn with a candidate w the policy wrote itself
    (`Choice.written`: a filled template) gets one more entry, s(w): the log-likelihood of writing it, so the
    action's log-probability is the choice's plus the writing's (`action_logprob`) and the written text is
    trained even where it was the only candidate. `choice_part` drops that entry."""
    out = []
    for scores, w in zip(totals.split(list(sizes)), written):
        lp = torch.log_softmax(scores / temperature, -1)
        out.append(lp if w is None else torch.cat([lp, scores[w:w + 1]]))
    return out


def choice_part(lp: torch.Tensor, turn: Any) -> torch.Tensor:
    """log π' over the turn's candidates alone (without the writing's entry)."""
    return lp[:len(turn.candidates)]


def action_logprob(lp: torch.Tensor, turn: Any, index: int | None = None) -> torch.Tensor:
    """log-probability of sending candidate `index` (the turn's chosen one by default): choosing it, and for the
    candidate the policy wrote, writing it."""
    index = turn.chosen if index is None else index
    return lp[index] + lp[-1] if turn.written is not None and index == turn.written else lp[index]


def packed_written(seqs: Sequence[Any], members: Sequence[int], block: Any) -> list[int | None]:
    """Each turn's written candidate (or None) in `block`'s turn order (packed_block(seqs, members))."""
    written: list[int | None] = [None] * len(block.turn_sizes)
    for j, index in enumerate(block.turn_index):
        for turn, u in zip(seqs[members[j]].turns, index):
            written[u] = turn.written
    return written


def packed_choice_logprobs(model: Any, block: Any, device: Any, temperature: float = 1.0, trunk: Any = None,
                           top: Any = None, written: Sequence[int | None] | None = None) -> list[list[torch.Tensor]]:
    """Per member row of `block` (policies/packed_rows.py), log π'(candidate) of each of its turns, from ONE
    pass over the packed row (attention in its pieces): as `choice_ppo.sequence_choice_logprobs` gives each
    member on its own row. `trunk`: the packed row's (packed_trunk), so only the top layers run; `top`: the
    model whose top layers and head score (a KL reference sharing `model`'s trunk); `written`: each turn's
    written candidate in the block's turn order (packed_written; `turn_logprobs`)."""
    from agentgym.policies.candidate_block import candidate_totals, decoder_and_head, target_logprobs
    from agentgym.policies.packed_rows import packed_tree_mask
    from agentgym.policies.trunk import run_layers, top_hidden

    scorer = model if top is None else top
    decoder, head = decoder_and_head(scorer)
    positions = torch.tensor([block.positions], device=device)
    mask = packed_tree_mask(block, next(model.parameters()).dtype, device)
    if trunk is not None:
        hidden = top_hidden(model, trunk, block.ids, positions, mask, top)
    else:
        embeds = decoder.get_input_embeddings()(torch.tensor([block.ids], device=device))
        hidden = decoder.norm(run_layers(decoder, embeds, mask, positions, decoder.layers))
    read = hidden[0, torch.tensor(block.read, device=device)]
    logprobs = torch.log_softmax(head(read).float(), -1)
    totals = candidate_totals(target_logprobs(logprobs, block), block)
    turns = turn_logprobs(totals, block.turn_sizes, temperature, written or [None] * len(block.turn_sizes))
    return [[turns[u] for u in index] for index in block.turn_index]


def reference_is_policy(c: Any) -> bool:
    """Whether the KL reference holds exactly the trained model's weights now (a separate copy, every tensor
    equal): then its log-probs are the policy's own. A reference that is the model itself (LoRA with the
    adapters switched off) is another function of the same tensors: never."""
    if c.ref is None:
        return False
    with torch.no_grad(), c.ref() as ref:
        if ref is c.model:
            return False
        mine, theirs = dict(c.model.named_parameters()), dict(ref.named_parameters())
        return mine.keys() == theirs.keys() and all(
            a.shape == theirs[n].shape and torch.equal(a, theirs[n]) for n, a in mine.items())
