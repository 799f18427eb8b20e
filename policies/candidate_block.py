"""Score many candidate continuations of one prompt in a single forward pass, without copying its KV.

The obvious way to score N candidates after a P-token prompt repeats the prompt's KV cache N times
and runs an [N, W] batch: N x P copies of every layer's keys and values (at P = 700, N = 18 that is
~0.6 GB per turn for SmolLM2-135M, kept for backward when training). Here the candidates are laid
end to end in ONE row after the prompt's last tokens, and a 4-D attention mask lets each candidate
token see the whole prompt and the earlier tokens of its own candidate only (a "tree" mask). Position
ids restart at the prompt's length for every candidate, so each token gets exactly the logits it would
get in a separate sequence; the prompt's KV is read once, never repeated.

    block = candidate_block(past=P - 1, prompt_tail=[last prompt token], candidates=cands)
    hidden = decoder(input_ids=block.ids, position_ids=block.positions, attention_mask=block.mask(dtype),
                     past_key_values=cache_of_first_P_minus_1_tokens).last_hidden_state
    scores = candidate_logprobs(head(hidden[0, block.read]).log_softmax(-1), block)

`candidate_block` and `split_scores` are pure bookkeeping; only `CandidateBlock.mask` builds a tensor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class CandidateBlock:
    """One row: `prompt_tail` (new prompt tokens, at least one) then each candidate's tokens but its last."""

    past: int                            # KV positions already cached before this row
    ids: tuple[int, ...]                 # the row's input tokens
    positions: tuple[int, ...]           # position id of each input token
    segment: tuple[int, ...]             # -1 for prompt tokens, else the candidate index
    read: tuple[int, ...]                # row indices whose logits are needed (last prompt token + bodies)
    targets: tuple[tuple[int, int], ...]  # per candidate token: (index into `read`, token id) it must score
    lengths: tuple[int, ...]             # tokens per candidate

    def mask(self, dtype: Any, device: Any = None) -> Any:
        """Additive [1, 1, Q, past + Q] mask: 0 where a query may attend, the dtype's minimum elsewhere."""
        import torch

        seg = torch.tensor(self.segment, device=device)
        q = len(self.ids)
        idx = torch.arange(q, device=device)
        causal = idx[None, :] <= idx[:, None]                          # key j <= query i
        key_is_prompt = (seg == -1)[None, :].expand(q, q)
        same_candidate = seg[None, :] == seg[:, None]
        allowed = causal & (key_is_prompt | same_candidate)
        allowed = torch.cat([torch.ones((q, self.past), dtype=torch.bool, device=device), allowed], dim=1)
        out = torch.zeros((q, self.past + q), dtype=dtype, device=device)
        out.masked_fill_(~allowed, torch.finfo(dtype).min)
        return out[None, None]


def candidate_block(past: int, prompt_tail: Sequence[int], candidates: Sequence[Sequence[int]]) -> CandidateBlock:
    """Lay out `prompt_tail` (the prompt tokens after the `past` cached ones; at least one, so the last
    prompt token's logits score every candidate's first token) and the candidates' bodies."""
    if not prompt_tail:
        raise ValueError("candidate_block needs at least the prompt's last token in prompt_tail")
    if not candidates or any(len(c) == 0 for c in candidates):
        raise ValueError("candidate_block needs non-empty candidates")
    prompt_len = past + len(prompt_tail)
    ids = list(prompt_tail)
    positions = list(range(past, prompt_len))
    segment = [-1] * len(prompt_tail)
    read = [len(prompt_tail) - 1]
    targets = []
    for k, cand in enumerate(candidates):
        targets.append((0, int(cand[0])))                  # first token: from the prompt's last logits
        for t, token in enumerate(cand[:-1]):
            ids.append(int(token))
            positions.append(prompt_len + t)
            segment.append(k)
            read.append(len(ids) - 1)
            targets.append((len(read) - 1, int(cand[t + 1])))  # next token: from this token's logits
    return CandidateBlock(past, tuple(ids), tuple(positions), tuple(segment), tuple(read), tuple(targets),
                          tuple(len(c) for c in candidates))


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
    """[N] total log-likelihood per candidate from the flat per-token tensor (differentiable)."""
    import torch

    owner = torch.repeat_interleave(torch.arange(len(block.lengths), device=flat.device),
                                    torch.tensor(block.lengths, device=flat.device))
    return torch.zeros(len(block.lengths), dtype=flat.dtype, device=flat.device).index_add(0, owner, flat)
