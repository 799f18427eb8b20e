"""Packed rows (policies/packed_rows.py): a group's episodes in one row, shared prefixes and repeated turns fed
once. Every token keeps its own row's id and position and sees exactly its own row's tokens, and the attention
pieces hold exactly the dense mask's allowed entries (the model's log-probs and gradients through a packed row:
tests/train/test_choice_rows.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.candidate_block import turns_block  # noqa: E402
from agentgym.policies.packed_rows import attention_pairs, pack_rows, packed_tree_mask  # noqa: E402

A = list(range(10, 40))                              # 30 conversation tokens
B = list(range(10, 30)) + [5, 6, 7, 8, 9]            # shares A's first 20
C = list(range(10, 30)) + [5, 6, 1, 2]               # shares B's first 22
TA = [(12, [[1, 2, 3], [1, 2, 4], [5]]), (25, [[6, 7], [6, 8, 9]]), (30, [[3, 3]])]
TB = [(12, [[1, 2, 3], [1, 2, 4], [5]]), (25, [[6, 7], [6, 8, 1]])]   # turn 1 = A's turn 1 (same prompt, cands)
TC = [(12, [[1, 2, 3], [1, 2, 4], [5]]), (24, [[4], [4, 4]])]


def test_every_token_sees_exactly_its_own_rows_tokens_and_shared_ones_are_fed_once():
    rows = [(A, TA), (B, TB), (C, TC)]
    block = pack_rows(rows)
    own, where = [turns_block(0, ids, turns) for ids, turns in rows], block.members
    assert all(block.members[j][k] == i for i, (j, k) in enumerate(block.sources))
    dense = block.mask(torch.float32)[0, 0] == 0
    for b, w in zip(own, where):
        mine = b.mask(torch.float32)[0, 0] == 0
        index = torch.tensor(w)
        assert torch.equal(dense[index][:, index], mine)                 # the same visibility among its tokens
        assert int(dense[index].sum()) == int(mine.sum())                # and nothing outside its row
        assert [block.ids[i] for i in w] == list(b.ids) and [block.positions[i] for i in w] == list(b.positions)
    # A's 30 conversation tokens, B's 5 after the 20 it shares, C's 2 after the 22 it shares with B; B's and C's
    # first turn is A's first (the same prompt, the same candidates)
    assert block.conversation == 37 and block.turn_index == ((0, 1, 2), (0, 3), (0, 4))
    assert len(block.ids) < block.own_tokens == sum(len(b.ids) for b in own)
    assert len(block.ids) == len(set(where[0]) | set(where[1]) | set(where[2]))


def test_the_pieces_hold_exactly_the_dense_masks_allowed_entries():
    block = pack_rows([(A, TA), (B, TB), (C, TC)])
    m = packed_tree_mask(block, torch.float32)
    dense = block.mask(torch.float32)[0, 0] == 0
    rebuilt = torch.zeros_like(dense)
    rebuilt[:m.context, :m.context] = torch.ones(m.context, m.context, dtype=torch.bool).tril()
    for (s, e, _), local, ranges in zip(m.spans, m.local, m.keys):
        cols = [c for a, b in ranges for c in range(a, b)] + list(range(s, e))
        rebuilt[s:e, torch.tensor(cols)] = local[0, 0] == 0
    assert torch.equal(rebuilt, dense)
    assert attention_pairs(block) < attention_pairs(block, dense=True)


def test_a_turn_must_end_inside_its_row():
    with pytest.raises(ValueError, match="inside its row"):
        pack_rows([(A, [(31, [[1]])])])
    with pytest.raises(ValueError, match="non-empty candidates"):
        pack_rows([(A, [(5, [[]])])])
