"""Several choice rows in ONE row, every token fed once: the shared prefixes of a group's episodes computed once.

A choice row (policies/candidate_block.py `turns_block(0, ids, turns)`) is one episode's conversation, then every
turn's candidate tree. The episodes of a group play the same task: they share the task prompt, and while their
picks agree (sampling at temperature 1 from the warm start picks the greedy action on ~95% of turns) whole
turns - the same prompt, the same admissible candidates. `pack_rows` lays several such rows out as one tree:

    episode A's conversation | B's conversation after its common prefix with A | A's trees | B's new trees

A conversation that starts like an earlier one continues as a branch after the shared prefix; a turn whose prompt
ends at the same row position with the same candidates as an earlier one IS that turn (one tree, its log-probs
read by both episodes). Every token sees exactly what it sees in its own row - its ancestors - at the same
position id, so its hidden states, logits and gradients are its own row's up to summation order
(tests/policies/test_packed_rows.py measures it).

    block = pack_rows([(seq.ids, [(t.prompt_len, t.candidates) for t in seq.turns]) for seq in group])
    mask = packed_tree_mask(block, dtype)               # attention in pieces (policies/tree_attention.py)
    ... hidden states at block.read, target_logprobs / candidate_totals as for a CandidateBlock ...
    turns = totals.split(block.turn_sizes); episode j's turn k is turns[block.turn_index[j][k]]

`block.sources` says where each token sits in its own row, so kept per-row hidden states (the rollout's trunk,
policies/rollout_trunk.py) are gathered into the packed row without running anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

from agentgym.policies.candidate_block import prefix_tree

Turns = Sequence[tuple[int, Sequence[Sequence[int]]]]
# a unit: a contiguous row span [start, end) whose tokens all see the row `ranges`, and among themselves their
# ancestors: `parents` holds each token's parent as an index inside the unit (-1: none inside, it hangs below
# the ranges' last token)
Unit = tuple[int, int, tuple[tuple[int, int], ...], tuple[int, ...]]


@dataclass(frozen=True)
class PackedBlock:
    """Rows packed as one tree (see the module docstring). `targets`, `lengths` and `turn_sizes` cover the
    distinct turns, as in a CandidateBlock; `turn_index[j]` maps row j's turns to them."""

    ids: tuple[int, ...]
    positions: tuple[int, ...]
    units: tuple[Unit, ...]                   # in row order, covering the row
    targets: tuple[tuple[int, int], ...]      # per candidate token: (row index of the logits that score it, token)
    lengths: tuple[int, ...]                  # tokens per candidate, over the distinct turns
    turn_sizes: tuple[int, ...]               # candidates per distinct turn
    turn_index: tuple[tuple[int, ...], ...]   # per packed row: its turns' indices among the distinct turns
    sources: tuple[tuple[int, int], ...]      # per token: (packed row j, index in turns_block(0, ids_j, turns_j))
    members: tuple[tuple[int, ...], ...]      # per packed row: the packed index of each token of its own row
    own_tokens: int                           # the rows' own lengths summed (what packing saves against)
    conversation: int                         # the leading tokens that are conversations (the rest: trees)

    @cached_property
    def read(self) -> tuple[int, ...]:
        """The row indices whose logits are needed, in order (as CandidateBlock.read)."""
        return tuple(sorted({r for r, _ in self.targets}))

    def mask(self, dtype: Any, device: Any = None) -> Any:
        """The dense additive [1, 1, Q, Q] mask: 0 where a token may attend (its ancestors and itself)."""
        import torch

        q = len(self.ids)
        allowed = torch.zeros((q, q), dtype=torch.bool, device=device)
        for start, end, ranges, parents in self.units:
            for a, b in ranges:
                allowed[start:end, a:b] = True
            allowed[start:end, start:end] = local_allowed(parents, device)
        out = torch.zeros((q, q), dtype=dtype, device=device)
        out.masked_fill_(~allowed, torch.finfo(dtype).min)
        return out[None, None]


def local_allowed(parents: Sequence[int], device: Any = None) -> Any:
    """[n, n] bool: token i sees itself and its ancestors inside its unit (a chain is the causal triangle)."""
    import torch

    n = len(parents)
    if all(p == i - 1 for i, p in enumerate(parents)):
        return torch.ones((n, n), dtype=torch.bool, device=device).tril()
    allowed = torch.eye(n, dtype=torch.bool, device=device)
    for i, p in enumerate(parents):    # parents come before their children
        if p >= 0:
            allowed[i] |= allowed[p]
    return allowed


def runs(rows: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Increasing row indices as [a, b) ranges of consecutive ones."""
    out: list[list[int]] = []
    for r in rows:
        if out and out[-1][1] == r:
            out[-1][1] = r + 1
        else:
            out.append([r, r + 1])
    return tuple((a, b) for a, b in out)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def pack_rows(rows: Sequence[tuple[Sequence[int], Turns]]) -> PackedBlock:
    """Lay out the choice rows `(ids, [(prompt_len, candidates), ...])` as one tree, every shared token once
    (see the module docstring). A row's conversation branches off the earlier row it shares most with."""
    ids: list[int] = []
    positions: list[int] = []
    units: list[Unit] = []
    sources: list[tuple[int, int]] = []
    conv: list[list[int]] = []               # per row: the packed row index of each conversation token
    seqs = [tuple(int(t) for t in r[0]) for r in rows]
    for j, seq in enumerate(seqs):
        if not seq:
            raise ValueError("pack_rows: every row needs its conversation's tokens")
        shared, base = max(((common_prefix(seq, other), k) for k, other in enumerate(seqs[:j])), default=(0, -1))
        start = len(ids)
        for i in range(shared, len(seq)):
            ids.append(seq[i])
            positions.append(i)
            sources.append((j, i))
        conv.append((conv[base][:shared] if shared else []) + list(range(start, len(ids))))
        if len(ids) > start:
            units.append((start, len(ids), runs(conv[j][:shared]), tuple(range(-1, len(ids) - start - 1))))
    conversation = len(ids)
    targets: list[tuple[int, int]] = []
    lengths: list[int] = []
    sizes: list[int] = []
    seen: dict[tuple[int, tuple[tuple[int, ...], ...]], tuple[int, list[int]]] = {}  # -> (turn, its node rows)
    turn_index, members = [], []
    for j, (seq, (_, turns)) in enumerate(zip(seqs, rows)):
        own = len(seq)                       # where this row's next tree node sits in its own turns_block row
        mine, where = [], list(conv[j])
        for prompt_len, candidates in turns:
            if not 0 < prompt_len <= len(seq):
                raise ValueError(f"a turn's prompt of {prompt_len} tokens must end inside its row (0, {len(seq)}]")
            cands = tuple(tuple(int(t) for t in c) for c in candidates)
            nodes, reads = prefix_tree(cands)
            key = (conv[j][prompt_len - 1], cands)
            if key not in seen:
                start = len(ids)
                node_of: dict[tuple[int, ...], int] = {(): conv[j][prompt_len - 1]}
                parents = []
                for k, prefix in enumerate(nodes):
                    ids.append(prefix[-1])
                    positions.append(prompt_len + len(prefix) - 1)
                    parents.append(node_of[prefix[:-1]] - start if len(prefix) > 1 else -1)
                    sources.append((j, own + k))
                    node_of[prefix] = len(ids) - 1
                if nodes:
                    units.append((start, len(ids), runs(conv[j][:prompt_len]), tuple(parents)))
                for cand, rs in zip(cands, reads):
                    targets += [(node_of[r], cand[len(r)]) for r in rs]
                    lengths.append(len(cand))
                sizes.append(len(cands))
                seen[key] = (len(sizes) - 1, [node_of[p] for p in nodes])
            mine.append(seen[key][0])
            where += seen[key][1]
            own += len(nodes)
        turn_index.append(tuple(mine))
        members.append(tuple(where))
    own_tokens = sum(len(s) for s in seqs) + sum(len(prefix_tree(c)[0]) for _, turns in rows for _, c in turns)
    return PackedBlock(tuple(ids), tuple(positions), tuple(units), tuple(targets), tuple(lengths), tuple(sizes),
                       tuple(turn_index), tuple(sources), tuple(members), own_tokens,
                       conversation)


def packed_tree_mask(block: PackedBlock, dtype: Any, device: Any = None) -> Any:
    """The block's attention in pieces (a `TreeMask`, policies/tree_attention.py): the first conversation as a
    causal attention, then per unit its tokens against [its ranges' keys, its own]."""
    import torch

    from agentgym.policies.tree_attention import TreeMask

    first = block.units[0]
    context = first[1] if first[0] == 0 and not first[2] and all(p == i - 1 for i, p in enumerate(first[3])) else 0
    spans, keys, local = [], [], []
    minimum = torch.finfo(dtype).min
    for start, end, ranges, parents in block.units:
        if end <= context:
            continue
        seen = sum(b - a for a, b in ranges)
        own = torch.zeros((end - start, end - start), dtype=dtype, device=device)
        own.masked_fill_(~local_allowed(parents, device), minimum)
        local.append(torch.cat([torch.zeros((end - start, seen), dtype=dtype, device=device), own], dim=1)[None, None])
        spans.append((start, end, seen))
        keys.append(ranges)
    return TreeMask(context, tuple(spans), tuple(local), len(block.ids), tuple(keys))


def attention_pairs(block: PackedBlock, dense: bool = False) -> int:
    """Query-key pairs one layer's attention computes for `block`: in its pieces (packed_tree_mask: the first
    conversation's causal triangle, each other unit's rectangle), or with `dense` the whole square."""
    if dense:
        return len(block.ids) ** 2
    total = 0
    for i, (start, end, ranges, _) in enumerate(block.units):
        n = end - start
        root = i == 0 and start == 0 and not ranges
        total += n * (n + 1) // 2 if root else n * (sum(b - a for a, b in ranges) + n)
    return total
