"""Tree attention (policies/tree_attention.py): a choice row's mask is cut into a causal conversation and
per-turn pieces that hold exactly the dense mask's allowed entries; attention in pieces gives the dense
masked SDPA's output; rows of another shape keep the dense mask; the model's attention setting is restored."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.candidate_block import candidate_block, turns_block  # noqa: E402
from agentgym.policies.tree_attention import TreeMask, tree_attention, tree_mask  # noqa: E402

CONV = list(range(10, 40))          # 30 conversation tokens
TURNS = [(12, [[1, 2, 3], [1, 2, 4], [5]]), (25, [[6, 7], [6, 8, 9], [6, 8, 2]]), (30, [[3, 3]])]


def test_the_pieces_hold_exactly_the_dense_masks_allowed_entries():
    block = turns_block(0, CONV, TURNS)
    m = tree_mask(block, torch.float32)
    assert isinstance(m, TreeMask) and m.context == 30 and m.length == len(block.ids)
    assert [v for _, _, v in m.spans] == [12, 25, 30]
    dense = block.mask(torch.float32)[0, 0] == 0
    rebuilt = torch.zeros_like(dense)
    rebuilt[:30, :30] = torch.ones(30, 30, dtype=torch.bool).tril()
    for (s, e, vis), local in zip(m.spans, m.local):
        allowed = local[0, 0] == 0
        rebuilt[s:e, :vis] = allowed[:, :vis]
        rebuilt[s:e, s:e] = allowed[:, vis:]
    assert torch.equal(rebuilt, dense)


def test_rows_of_another_shape_keep_the_dense_mask():
    assert tree_mask(candidate_block(5, [7, 8], [[1, 2], [3]]), torch.float32) is None  # a cached past
    assert tree_mask(turns_block(0, CONV, []), torch.float32).spans == ()           # no tree: causal only


class _Module:
    num_key_value_groups = 3
    is_causal = True
    training = False


def test_attention_in_pieces_equals_the_dense_masked_sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    block = turns_block(0, CONV, TURNS)
    q_len = len(block.ids)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 6, q_len, 16, generator=g, requires_grad=True)
    k = torch.randn(1, 2, q_len, 16, generator=g, requires_grad=True)
    v = torch.randn(1, 2, q_len, 16, generator=g, requires_grad=True)
    dense, _ = sdpa_attention_forward(_Module(), q, k, v, block.mask(torch.float32), scaling=0.25)
    tree, _ = tree_attention(_Module(), q, k, v, tree_mask(block, torch.float32), scaling=0.25)
    assert tree.shape == dense.shape == (1, q_len, 6, 16)
    assert torch.allclose(tree, dense, atol=1e-6, rtol=0)
    grads = [torch.autograd.grad(out.square().sum(), (q, k, v)) for out in (dense, tree)]
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="cut for"):
        tree_attention(_Module(), q[:, :, :-1], k[:, :, :-1], v[:, :, :-1], tree_mask(block, torch.float32))


def test_the_model_attention_setting_is_restored(tmp_path):
    from transformers import AutoModelForCausalLM

    from agentgym.policies.trunk import run_layers
    from agentgym.train import tiny

    model = AutoModelForCausalLM.from_pretrained(str(tiny.build_tiny(tmp_path / "tiny", layers=2, hidden=64)))
    before = model.config._attn_implementation
    vocab = model.config.vocab_size
    block = turns_block(0, [t % vocab for t in CONV], [(n, [[t % vocab for t in c] for c in cs]) for n, cs in TURNS])
    decoder = model.get_decoder()
    hidden = decoder.get_input_embeddings()(torch.tensor([block.ids]))
    positions = torch.tensor([block.positions])
    with torch.no_grad():
        tree = run_layers(decoder, hidden, tree_mask(block, torch.float32), positions, decoder.layers)
        dense = run_layers(decoder, hidden, block.mask(torch.float32), positions, decoder.layers)
    assert model.config._attn_implementation == before
    # measured: 1.5e-5 on hidden states up to 24 (6e-7 relative), summation order only
    assert float((tree - dense).abs().max()) <= 1e-5 * float(dense.abs().max())
