"""Score many candidate continuations of one prompt in a single forward pass, without copying its KV.

The obvious way to score N candidates after a P-token prompt repeats the prompt's KV cache N times
and runs an [N, W] batch: N x P copies of every layer's keys and values (at P = 700, N = 18 that is
~0.6 GB per turn for SmolLM2-135M, kept for backward when training). Here the candidates are laid
end to end in ONE row after the prompt's last tokens, and a 4-D attention mask lets each candidate
token see the whole prompt and the earlier tokens of its own candidate only (a "tree" mask). Position
ids restart at the prompt's length for every candidate, so each token gets exactly the logits it would
get in a separate sequence; the prompt's KV is read once, never repeated.

    block = candidate_block(past=P - 1, prompt_tail=[last prompt token], candidates=cands)
    # or every turn of a conversation at once: turns_block(0, conversation, [(prompt_len, cands), ...])
    hidden = decoder(input_ids=block.ids, position_ids=block.positions, attention_mask=block.mask(dtype),
                     past_key_values=cache_of_first_P_minus_1_tokens).last_hidden_state
    scores = candidate_logprobs(head(hidden[0, block.read]).log_softmax(-1), block)

`turns_block` puts several turns' candidates in one row after a whole conversation (training scores
every turn of an episode in one pass). The layout functions are pure bookkeeping; `CandidateBlock.mask`
and the two gathers build tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class CandidateBlock:
    """One row: `prompt_tail` (prompt tokens after the `past` cached ones) then, for each turn, each
    candidate's tokens but its last; a candidate of turn k sees the first `prompt_len_k` positions."""

    past: int                            # KV positions already cached before this row
    ids: tuple[int, ...]                 # the row's input tokens
    positions: tuple[int, ...]           # position id of each input token
    segment: tuple[int, ...]             # -1 for prompt tokens, else a candidate's index over all turns
    visible: tuple[int, ...]             # candidate tokens: how many leading positions they see (prompt: 0)
    read: tuple[int, ...]                # row indices whose logits are needed (turns' last prompt tokens, bodies)
    targets: tuple[tuple[int, int], ...]  # per candidate token: (index into `read`, token id) it must score
    lengths: tuple[int, ...]             # tokens per candidate, over all turns
    turn_sizes: tuple[int, ...]          # candidates per turn

    def mask(self, dtype: Any, device: Any = None) -> Any:
        """Additive [1, 1, Q, past + Q] mask: 0 where a query may attend, the dtype's minimum elsewhere."""
        import torch

        seg = torch.tensor(self.segment, device=device)
        visible = torch.tensor(self.visible, device=device)
        pos = torch.tensor(self.positions, device=device)
        q = len(self.ids)
        idx = torch.arange(q, device=device)
        is_prompt = seg == -1
        causal = idx[None, :] <= idx[:, None]                                # key j <= query i
        prompt_key_seen = is_prompt[None, :] & (causal & is_prompt[:, None]  # prompt: plain causal
                                                | (pos[None, :] < visible[:, None]) & ~is_prompt[:, None])
        own_candidate = ~is_prompt[None, :] & (seg[None, :] == seg[:, None]) & causal
        allowed = torch.cat([torch.ones((q, self.past), dtype=torch.bool, device=device),
                             prompt_key_seen | own_candidate], dim=1)
        out = torch.zeros((q, self.past + q), dtype=dtype, device=device)
        out.masked_fill_(~allowed, torch.finfo(dtype).min)
        return out[None, None]


def turns_block(past: int, prompt_tail: Sequence[int],
                turns: Sequence[tuple[int, Sequence[Sequence[int]]]]) -> CandidateBlock:
    """Lay out `prompt_tail` (the tokens after the `past` cached ones) and, for each (prompt_len,
    candidates) turn, the candidates' bodies; each turn's last prompt token (position prompt_len - 1)
    must be in the row, since its logits score the candidates' first tokens."""
    end = past + len(prompt_tail)
    ids, positions = list(prompt_tail), list(range(past, end))
    segment, visible = [-1] * len(prompt_tail), [0] * len(prompt_tail)
    read, targets, lengths, sizes = [], [], [], []
    for prompt_len, candidates in turns:
        if not past < prompt_len <= end:
            raise ValueError(f"a turn's prompt of {prompt_len} tokens must end inside the row ({past}, {end}]")
        if not candidates or any(len(c) == 0 for c in candidates):
            raise ValueError("every turn needs non-empty candidates")
        read.append(prompt_len - 1 - past)
        first = len(read) - 1
        for cand in candidates:
            k = len(lengths)
            targets.append((first, int(cand[0])))            # first token: from the prompt's last logits
            for t, token in enumerate(cand[:-1]):
                ids.append(int(token))
                positions.append(prompt_len + t)
                segment.append(k)
                visible.append(prompt_len)
                read.append(len(ids) - 1)
                targets.append((len(read) - 1, int(cand[t + 1])))  # next token: from this token's logits
            lengths.append(len(cand))
        sizes.append(len(candidates))
    return CandidateBlock(past, tuple(ids), tuple(positions), tuple(segment), tuple(visible), tuple(read),
                          tuple(targets), tuple(lengths), tuple(sizes))


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
    """The flat [sum(lengths)] tensor of target-token log-probs from [len(read), V] log-probs."""
    import torch

    rows = torch.tensor([r for r, _ in block.targets], device=read_logprobs.device)
    cols = torch.tensor([t for _, t in block.targets], device=read_logprobs.device)
    return read_logprobs[rows, cols]


def candidate_totals(flat: Any, block: CandidateBlock) -> Any:
    """[N] total log-likelihood per candidate (all turns') from the flat per-token tensor (differentiable);
    `.split(block.turn_sizes)` gives each turn's."""
    import torch

    owner = torch.repeat_interleave(torch.arange(len(block.lengths), device=flat.device),
                                    torch.tensor(block.lengths, device=flat.device))
    return torch.zeros(len(block.lengths), dtype=flat.dtype, device=flat.device).index_add(0, owner, flat)
