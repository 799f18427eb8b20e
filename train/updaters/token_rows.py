"""Token PPO's packed micro-batches (train/updaters/token_ppo.py with `train.token_budget`): no padding computed.

A micro-batch is the samples that fit `token_budget` tokens (the tokens each adds to the row), taken in the
mini-batch's order sorted by token ids (`prefix_order`: samples sharing a prefix sit together), laid out as ONE
row by policies/packed_rows.py: sequences one after another, a sequence's tokens attending only to its own
earlier tokens (a prefix it shares with an earlier sequence - a group's task prompt, a branch's copied turns - is
fed once and both read it), position ids restarting per sequence. Every token sees what it sees in its own padded row at
the same position id, so log-probs and gradients are the padded forward's up to summation order
(tests/train/test_token_rows.py measures it). A sample longer than the budget gets a row of its own (never
refused, never cut): `PackedTokens.own_rows` counts them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from agentgym.train.updaters import losses as L


def prefix_order(samples: Sequence[Any], index: Sequence[int]) -> list[int]:
    """`index` sorted by the samples' token ids, so samples sharing a prefix sit side by side and a packed row
    feeds it once: a group's plays (the task prompt), a branch and its trunk (the copied turns). The mini-batch
    is the same set, and its gradient a sum over its micro-batches: only the summation order changes."""
    return sorted((int(i) for i in index), key=lambda i: tuple(samples[i].ids))


def budget_micro_batches(samples: Sequence[Any], index: Sequence[int], token_budget: int) -> list[list[int]]:
    """`index` cut, in order, into micro-batches of at most `token_budget` tokens (a longer sample alone). A
    sample counts the tokens it adds to the row: all but its common prefix with the sample before it (the row
    feeds that prefix once; with any earlier sample it may share more, so the row is never longer)."""
    from agentgym.policies.packed_rows import common_prefix

    out: list[list[int]] = []
    used = 0
    for i in index:
        n = len(samples[i])
        added = n - common_prefix(samples[out[-1][-1]].ids, samples[i].ids) if out else n
        if out and used + added <= token_budget:
            out[-1].append(int(i))
            used += added
        else:
            out.append([int(i)])
            used = n
    return out


@dataclass
class PackedTokens:
    """What the packed micro-batches computed, against the padded layout of the same micro-batches."""
    micro_batches: int = 0
    tokens: int = 0          # tokens run (packed rows' lengths)
    padded_tokens: int = 0   # what padding each micro-batch to its longest sample would have run
    own_rows: int = 0        # samples longer than the budget, each run in a row of its own

    def add(self, lengths: Sequence[int], packed: int, token_budget: int) -> None:
        self.micro_batches += 1
        self.tokens += packed
        self.padded_tokens += len(lengths) * max(lengths)
        self.own_rows += sum(n > token_budget for n in lengths)

    def as_metrics(self) -> dict[str, float]:
        m = max(self.micro_batches, 1)
        return {"update/micro_batches": float(self.micro_batches), "update/tokens_per_micro_batch": self.tokens / m,
                "update/padding_share": 0.0, "update/padded_layout_padding_share":
                    1.0 - self.tokens / self.padded_tokens if self.padded_tokens else 0.0,
                "update/own_row_sequences": float(self.own_rows)}


def refuse_unsupported(critic: Any, dist: Any) -> None:
    """Packing runs the policy's decoder layers itself: a critic (it reads the padded batch) and distributed
    runs (their wrappers must run the forward) are refused, never silently run padded."""
    if critic is not None:
        raise ValueError("train.token_budget does not support a critic (algorithm.value.*): unset train.token_budget")
    if dist is not None:
        raise ValueError("train.token_budget does not support distributed runs: unset train.token_budget")


def packed_action_logits(model: Any, samples: Sequence[Any], index: Sequence[int], device: Any
                         ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(logits [N, V] and target tokens [N] at the N action positions of `samples[index]`, in the padded
    forward's order - sample by sample, position by position - and the packed row's length)."""
    from agentgym.policies.candidate_block import decoder_and_head
    from agentgym.policies.packed_rows import pack_rows, packed_tree_mask
    from agentgym.policies.trunk import run_layers

    block = pack_rows([(samples[i].ids, []) for i in index])
    decoder, head = decoder_and_head(model)
    reads, targets = [], []
    for k, i in enumerate(index):
        s = samples[i]
        at = (s.row[1:] >= 0).nonzero()[0]            # shifted positions p whose token p+1 is an action
        reads += [block.members[k][p] for p in at]
        targets += [int(s.ids[p + 1]) for p in at]
    positions = torch.tensor([block.positions], device=device)
    mask = packed_tree_mask(block, next(model.parameters()).dtype, device)
    embeds = decoder.get_input_embeddings()(torch.tensor([block.ids], device=device))
    hidden = decoder.norm(run_layers(decoder, embeds, mask, positions, decoder.layers))       # [1, Q, H]
    logits = head(hidden[0, torch.tensor(reads, dtype=torch.long, device=device)])        # [N, V]
    return logits, torch.tensor(targets, dtype=torch.long, device=device), len(block.ids)


def packed_forward(model: Any, samples: Sequence[Any], index: Sequence[int], device: Any, temperature: float,
                   pad_id: int, want_entropy: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
    """token_ppo.forward's figures from one packed row: log-probs [B, T-1] on the padded grid the loss reads
    (0 off the actions), the action mask [B, T-1], entropies at the actions [N] (with `want_entropy`), and the
    row's length. No critic (refuse_unsupported)."""
    from agentgym.train.samples import collate

    batch = collate(samples, index, pad_id)
    bool_mask = torch.as_tensor(batch.row[:, 1:] >= 0, device=device)        # [B, T-1] token p+1 is an action
    logits, targets, packed = packed_action_logits(model, samples, index, device)
    picked = L.token_logprobs(logits, targets, temperature)                    # [N]
    logprobs = torch.zeros(bool_mask.shape, dtype=picked.dtype, device=device).masked_scatter(bool_mask, picked)
    entropy = None
    if want_entropy:
        entropy = L.entropy_from_logits(logits / temperature) if logits.numel() else logits.new_zeros(0)
    return logprobs, bool_mask.float(), entropy, packed
