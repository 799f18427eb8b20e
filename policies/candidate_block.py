"""Score many candidate continuations of one prompt in a single forward pass, without copying its KV.

The obvious way to score N candidates after a P-token prompt repeats the prompt's KV cache N times
and runs an [N, W] batch: N x P copies of every layer's keys and values (at P = 700, N = 18 that is
~0.6 GB per turn for SmolLM2-135M, kept for backward when training). Here the candidates' prefix tree
(a prefix several share, "go to cabinet", is fed once) is laid out in ONE row after the prompt's last
tokens, and a 4-D attention mask lets each tree node see the whole prompt, its ancestors and itself
only. Position ids follow the depth in the tree, so each token gets exactly the logits it would get
in a separate sequence; the prompt's KV is read once, never repeated.

    block = candidate_block(past=P - 1, prompt_tail=[last prompt token], candidates=cands)
    # or every turn of a conversation at once: turns_block(0, conversation, [(prompt_len, cands), ...])
    hidden = decoder(input_ids=block.ids, position_ids=block.positions, attention_mask=block.mask(dtype),
                     past_key_values=cache_of_first_P_minus_1_tokens).last_hidden_state
    flat = target_logprobs(head(hidden[0, block.read]).log_softmax(-1), block)  # per candidate token
    totals = candidate_totals(flat, block)                                       # per candidate

`turns_block` puts several turns' candidates in one row after a whole conversation (training scores
every turn of an episode in one pass). The layout functions are pure bookkeeping; `CandidateBlock.mask`
and the two gathers build tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence


@dataclass(frozen=True)
class CandidateBlock:
    """One row: `prompt_tail` (prompt tokens after the `past` cached ones) then, per turn, the prefix tree
    of its candidates without their last tokens; a turn's tree nodes see its first `prompt_len` positions."""

    past: int                            # KV positions already cached before this row
    ids: tuple[int, ...]                 # the row's input tokens
    positions: tuple[int, ...]           # position id of each input token
    parent: tuple[int, ...]              # tree nodes: row index of the parent node (-1 at a root); prompt: -1
    visible: tuple[int, ...]             # tree nodes: how many leading positions they see; prompt tokens: 0
    targets: tuple[tuple[int, int], ...]  # per candidate token: (row index of the logits that score it, token id)
    lengths: tuple[int, ...]             # tokens per candidate, over all turns
    turn_sizes: tuple[int, ...]          # candidates per turn

    @cached_property
    def read(self) -> tuple[int, ...]:
        """The row indices whose logits are needed, in order (read by the caller and by `target_logprobs`)."""
        return tuple(sorted({r for r, _ in self.targets}))

    def mask(self, dtype: Any, device: Any = None) -> Any:
        """Additive [1, 1, Q, past + Q] mask: 0 where a query may attend, the dtype's minimum elsewhere.
        Prompt tokens: causal. Tree nodes: the cache, the prompt up to their turn's `visible`, their
        ancestors and themselves - never a sibling's branch or another turn's tree."""
        import torch

        q = len(self.ids)
        visible = torch.tensor(self.visible, device=device)
        pos = torch.tensor(self.positions, device=device)
        is_prompt = visible == 0
        idx = torch.arange(q, device=device)
        allowed = is_prompt[None, :] & ((idx[None, :] <= idx[:, None]) & is_prompt[:, None]
                                        | (pos[None, :] < visible[:, None]) & ~is_prompt[:, None])
        nodes = (~is_prompt).nonzero().squeeze(1)
        allowed[nodes, nodes] = True
        parent = torch.tensor(self.parent, device=device)
        up = parent[nodes]
        while (up >= 0).any():  # walk every node's ancestors at once, one level per pass
            keep = up >= 0
            allowed[nodes[keep], up[keep]] = True
            nodes, up = nodes[keep], parent[up[keep]]
        allowed = torch.cat([torch.ones((q, self.past), dtype=torch.bool, device=device), allowed], dim=1)
        out = torch.zeros((q, self.past + q), dtype=dtype, device=device)
        out.masked_fill_(~allowed, torch.finfo(dtype).min)
        return out[None, None]


def decoder_and_head(model: Any) -> tuple[Any, Any]:
    """(the decoder stack, the LM head) of a causal LM, through a peft wrapper if there is one: the
    block runs the decoder on its row and the head only on the rows it reads."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder(), base.get_output_embeddings()


def turns_block(past: int, prompt_tail: Sequence[int],
                turns: Sequence[tuple[int, Sequence[Sequence[int]]]]) -> CandidateBlock:
    """Lay out `prompt_tail` (the tokens after the `past` cached ones) and, for each (prompt_len,
    candidates) turn, the prefix tree of the candidates' bodies: a prefix shared by several candidates
    ("go to cabinet ...") is fed once. Each turn's last prompt token (position prompt_len - 1) must be in
    the row, since its logits score the candidates' first tokens."""
    end = past + len(prompt_tail)
    ids, positions = list(prompt_tail), list(range(past, end))
    parent, visible = [-1] * len(prompt_tail), [0] * len(prompt_tail)
    targets, lengths, sizes = [], [], []
    for prompt_len, candidates in turns:
        if not past < prompt_len <= end:
            raise ValueError(f"a turn's prompt of {prompt_len} tokens must end inside the row ({past}, {end}]")
        nodes, reads = prefix_tree(candidates)
        node_of: dict[tuple[int, ...], int] = {(): prompt_len - 1 - past}  # prefix -> row index fed with it
        for prefix in nodes:                         # the node for prefix p feeds token p[-1]
            ids.append(prefix[-1])
            positions.append(prompt_len + len(prefix) - 1)
            parent.append(node_of[prefix[:-1]] if len(prefix) > 1 else -1)
            visible.append(prompt_len)
            node_of[prefix] = len(ids) - 1
        for cand, rs in zip(candidates, reads):
            targets += [(node_of[r], int(cand[len(r)])) for r in rs]  # token t is scored from prefix cand[:t]
            lengths.append(len(cand))
        sizes.append(len(candidates))
    return CandidateBlock(past, tuple(ids), tuple(positions), tuple(parent), tuple(visible), tuple(targets),
                          tuple(lengths), tuple(sizes))


def prefix_tree(candidates: Sequence[Sequence[int]]) -> tuple[list[tuple[int, ...]], list[list[tuple[int, ...]]]]:
    """The candidates' prefix tree: its nodes (every proper non-empty prefix, in first-seen order; a node is
    fed the prefix's last token) and per candidate the prefix each of its tokens is scored from (() is the
    turn's last prompt token)."""
    if not candidates or any(len(c) == 0 for c in candidates):
        raise ValueError("every turn needs non-empty candidates")
    nodes: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    reads = []
    for cand in candidates:
        cand = tuple(int(t) for t in cand)
        for t in range(1, len(cand)):
            if cand[:t] not in seen:
                seen.add(cand[:t])
                nodes.append(cand[:t])
        reads.append([cand[:t] for t in range(len(cand))])
    return nodes, reads


def candidate_block(past: int, prompt_tail: Sequence[int], candidates: Sequence[Sequence[int]]) -> CandidateBlock:
    """One turn: the candidates continue the whole prompt (`past` cached tokens + `prompt_tail`, at least one)."""
    if not prompt_tail:
        raise ValueError("candidate_block needs at least the prompt's last token in prompt_tail")
    return turns_block(past, prompt_tail, [(past + len(prompt_tail), candidates)])


def split_scores(token_logprobs: Sequence[float], block: CandidateBlock) -> list[list[float]]:
    """Per-candidate lists of per-token log-probs, from the flat list ordered like `block.targets`."""
    out, start = [], 0
    for n in block.lengths:
        out.append(list(token_logprobs[start:start + n]))
        start += n
    return out


def target_logprobs(read_logprobs: Any, block: CandidateBlock) -> Any:
    """The flat [sum(lengths)] tensor of target-token log-probs from [len(block.read), V] log-probs
    (the rows `block.read` of the row's logits)."""
    import torch

    where = {r: k for k, r in enumerate(block.read)}
    rows = torch.tensor([where[r] for r, _ in block.targets], device=read_logprobs.device)
    cols = torch.tensor([t for _, t in block.targets], device=read_logprobs.device)
    return read_logprobs[rows, cols]


def candidate_totals(flat: Any, block: CandidateBlock) -> Any:
    """[N] total log-likelihood per candidate (all turns') from the flat per-token tensor (differentiable);
    `.split(block.turn_sizes)` gives each turn's."""
    import torch

    owner = torch.repeat_interleave(torch.arange(len(block.lengths), device=flat.device),
                                    torch.tensor(block.lengths, device=flat.device))
    return torch.zeros(len(block.lengths), dtype=flat.dtype, device=flat.device).index_add(0, owner, flat)
