"""The tree layout that scores many candidates in one row: positions, what each token may see, targets."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentgym.policies.candidate_block import candidate_block, split_scores, turns_block  # noqa: E402


def seen(block, query):
    """Absolute positions (cache first, then row tokens) the row's `query` token may attend to."""
    m = block.mask(torch.float32)[0, 0, query]
    keys = list(range(block.past)) + [block.positions[j] for j in range(len(block.ids))]
    return [(k, block.ids[j - block.past] if j >= block.past else None)
            for j, k in enumerate(keys) if m[j] == 0]


def test_one_turn_layout():
    b = candidate_block(3, [10, 11], [[20, 21, 22], [30], [40, 41]])
    assert b.ids == (10, 11, 20, 21, 40)                 # candidates' last tokens are never fed
    assert b.positions == (3, 4, 5, 6, 5)               # each candidate restarts at the prompt's length
    assert b.parent == (-1, -1, -1, 2, -1)
    assert b.read == (1, 2, 3, 4)
    # first tokens from the prompt's last logits (row 1); later tokens from their predecessor's node
    assert b.targets == ((1, 20), (2, 21), (3, 22), (1, 30), (1, 40), (4, 41))
    assert b.lengths == (3, 1, 2) and b.turn_sizes == (3,)
    assert split_scores([1, 2, 3, 4, 5, 6], b) == [[1, 2, 3], [4], [5, 6]]


def test_shared_prefixes_are_fed_once():
    go = [[7, 8, 20, 1, 99], [7, 8, 20, 2, 99], [7, 8, 30, 1, 99], [5, 99]]  # "go to cabinet 1", ...
    b = candidate_block(0, [1, 2], go)
    assert b.ids == (1, 2, 7, 8, 20, 1, 2, 30, 1, 5)     # 10 fed instead of 2 + 4 * 4 - 3 = 15 with no tree
    assert b.positions == (0, 1, 2, 3, 4, 5, 5, 4, 5, 2)
    # "cabinet 2" (row 6) sees the prompt and "go to cabinet" only; never the other numbers
    assert [t for _, t in seen(b, 6)] == [1, 2, 7, 8, 20, 2]
    assert [t for _, t in seen(b, 8)] == [1, 2, 7, 8, 30, 1]
    assert b.targets[5:10] == ((1, 7), (2, 8), (3, 20), (4, 2), (6, 99))


def test_mask_candidates_see_the_prompt_and_their_own_tokens_only():
    b = candidate_block(2, [10, 11], [[20, 21, 22], [40, 41]])
    # row: 10 11 | 20 21 | 40 ; cache holds positions 0, 1
    assert [k for k, _ in seen(b, 0)] == [0, 1, 2]                   # prompt token: causal
    assert [t for _, t in seen(b, 3)] == [None, None, 10, 11, 20, 21]  # "21" sees the prompt and "20"
    assert [t for _, t in seen(b, 4)] == [None, None, 10, 11, 40]      # "40" never sees the other candidate


def test_several_turns_see_only_their_own_prompt():
    conversation = [1, 2, 3, 4, 5, 6]
    b = turns_block(0, conversation, [(3, [[7, 8]]), (6, [[9, 10]])])
    assert b.ids == (1, 2, 3, 4, 5, 6, 7, 9)
    assert b.positions[6:] == (3, 6)
    assert b.targets == ((2, 7), (6, 8), (5, 9), (7, 10))   # turn 1 scores from position 2, turn 2 from 5
    assert [t for _, t in seen(b, 6)] == [1, 2, 3, 7]          # turn 1's candidate: not tokens 4..6
    assert [t for _, t in seen(b, 7)] == [1, 2, 3, 4, 5, 6, 9]
    assert b.turn_sizes == (1, 1)


def test_bad_layouts_are_refused():
    with pytest.raises(ValueError, match="last token"):
        candidate_block(4, [], [[1]])
    with pytest.raises(ValueError, match="end inside the row"):
        turns_block(4, [5, 6], [(4, [[1]])])      # its last prompt token is cached, not in the row
    with pytest.raises(ValueError, match="non-empty"):
        candidate_block(0, [1], [[]])
