"""The cached frozen trunk (policies/trunk.py): the choice loss and every trainable gradient equal the
full forward's; a cache computed with other trunk weights, another split or other ids is refused; an
optimizer step on the top layers keeps it valid; the choice update and SFT use it and say where time went."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.trunk import StaleTrunkError, trainable_start, trunk_hidden  # noqa: E402
from agentgym.train.updaters.choice_ppo import ChoiceSequence, sequence_choice_logprobs, sequence_trunk  # noqa: E402
from agentgym.train.setup import freeze_below_top_layers  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture()
def tiny4(tiny_choice):
    """A 4-layer tiny Llama with the top 2 layers trainable (trunk: embeddings + layers 0-1) and a two-turn
    choice sequence."""
    model, _, seq = tiny_choice
    return model, seq


def _loss_and_grads(model, seq, trunk, tree=False):
    model.zero_grad(set_to_none=True)
    logps = sequence_choice_logprobs(model, seq, CPU, trunk=trunk, tree=tree)
    loss = -sum(lp[t.chosen] for lp, t in zip(logps, seq.turns)) / len(seq.turns)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), logps, grads


def test_cached_trunk_gives_the_full_forwards_loss_and_gradients(tiny4):
    model, seq = tiny4
    assert trainable_start(model) == 2
    trunk = sequence_trunk(model, seq, CPU, tree=False)
    assert trunk is not None and trunk.start == 2 and not trunk.hidden.requires_grad
    loss_full, lp_full, g_full = _loss_and_grads(model, seq, None)
    loss_cached, lp_cached, g_cached = _loss_and_grads(model, seq, trunk)
    # the same operations in the same order: measured max differences are 0 here (fp32, one thread);
    # the bound leaves room for another BLAS's summation order
    assert abs(float(loss_full - loss_cached)) <= 1e-6
    for a, b in zip(lp_full, lp_cached):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    assert set(g_full) == set(g_cached) and len(g_full) == 2 * 9 + 1  # 2 layers x 9 tensors + final norm
    for name in g_full:
        assert torch.allclose(g_full[name], g_cached[name], atol=1e-6, rtol=1e-5), name
    assert any(g.abs().sum() > 0 for g in g_cached.values())


def test_cached_trunk_with_tree_attention_is_within_the_measured_tolerance(tiny4):
    """The default path (trunk and top both with policies/tree_attention.py) sums attention in other
    pieces than the dense mask: measured here max |d logp| 2.4e-6 (log-probs down to -13.7) and the
    SmolLM2 rows of benchmarks/choice_speed.py 3.8e-6 on the loss, 2e-5 on a gradient element."""
    model, seq = tiny4
    trunk = sequence_trunk(model, seq, CPU)  # tree attention by default
    assert torch.allclose(trunk.hidden, sequence_trunk(model, seq, CPU, tree=False).hidden, atol=1e-5, rtol=0)
    loss_full, lp_full, g_full = _loss_and_grads(model, seq, None)
    loss_tree, lp_tree, g_tree = _loss_and_grads(model, seq, trunk, tree=True)
    assert abs(float(loss_full - loss_tree)) <= 1e-5
    for a, b in zip(lp_full, lp_tree):
        assert torch.allclose(a, b, atol=2e-5, rtol=0)
    for name in g_full:
        assert torch.allclose(g_full[name], g_tree[name], atol=1e-5, rtol=1e-4), name


def test_a_step_on_the_top_keeps_the_cache_and_changing_the_trunk_refuses_it(tiny4):
    model, seq = tiny4
    trunk = sequence_trunk(model, seq, CPU)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    _loss_and_grads(model, seq, trunk)
    optimizer.step()  # the top layers move: the trunk's output does not
    after_step = sequence_trunk(model, seq, CPU)
    assert torch.equal(after_step.hidden, trunk.hidden)
    _loss_and_grads(model, seq, trunk)  # still accepted
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(1.01)  # a weight below the trainable block
    with pytest.raises(StaleTrunkError, match="below the trainable block.*recompute"):
        sequence_choice_logprobs(model, seq, CPU, trunk=trunk)
    fresh = sequence_trunk(model, seq, CPU)
    assert not torch.equal(fresh.hidden, trunk.hidden)
    sequence_choice_logprobs(model, seq, CPU, trunk=fresh)


def test_a_cache_for_another_split_or_other_ids_is_refused(tiny4):
    model, seq = tiny4
    trunk = sequence_trunk(model, seq, CPU)
    freeze_below_top_layers(model, 3)  # layer 1 now trains: the cache ends above it
    with pytest.raises(StaleTrunkError, match="first trainable layer is now 1"):
        sequence_choice_logprobs(model, seq, CPU, trunk=trunk)
    freeze_below_top_layers(model, 2)
    other = ChoiceSequence(seq.ids[:-1] + (seq.ids[-1] + 1,), seq.turns)
    with pytest.raises(StaleTrunkError, match="other input ids"):
        sequence_choice_logprobs(model, other, CPU, trunk=trunk)


def test_nothing_frozen_means_no_trunk(tiny4):
    model, seq = tiny4
    freeze_below_top_layers(model, 4)  # every layer trains (the embeddings do not): nothing below to skip
    assert trainable_start(model) == 0 and sequence_trunk(model, seq, CPU) is None
    for p in model.parameters():
        p.requires_grad_(True)
    assert trainable_start(model) == 0
    assert trunk_hidden(model, [1, 2, 3], torch.arange(3)[None], torch.zeros(1, 1, 3, 3)) is None


def _update(components, model, seq):
    import copy

    import numpy as np

    from agentgym.train.config import load_config
    from agentgym.train.updaters.choice_ppo import choice_update
    from agentgym.train.updaters.choice_rows import PLAIN

    cfg = load_config("toy_learning", ["train.ppo_epochs=2", "train.mini_batches=1", "optim.lr=1e-2"])
    model = copy.deepcopy(model)
    # one row per sequence (the two equal sequences would pack into one row: tests/train/test_choice_rows.py)
    stats = choice_update(components(cfg, model), [seq, seq], np.array([1.0, -0.5]), cfg, shuffle_seed=0,
                          shortcuts=PLAIN)
    return model, stats


def test_two_epoch_update_with_the_cache_equals_it_without_and_reports_its_cost(tiny4, monkeypatch,
                                                                              choice_components):
    from agentgym.policies import tree_attention
    from agentgym.policies.candidate_block import turns_block
    from agentgym.train.updaters import choice_ppo

    model, seq = tiny4
    tree_model, tree_stats = _update(choice_components, model, seq)  # the default: cached trunk + tree attention
    monkeypatch.setattr(tree_attention, "tree_mask", lambda *a, **k: None)  # the dense mask everywhere
    cached_model, stats = _update(choice_components, model, seq)
    monkeypatch.setattr(choice_ppo, "sequence_trunk", lambda *a, **k: None)  # every pass runs all layers
    full_model, full_stats = _update(choice_components, model, seq)
    for (name, a), b in zip(cached_model.named_parameters(), full_model.parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), name
    assert any(not torch.equal(a, b) for a, b in zip(cached_model.parameters(), model.parameters()))
    assert stats.policy_loss == pytest.approx(full_stats.policy_loss, abs=1e-6)
    # tree attention: the same loss to summation order (AdamW's first steps divide each gradient element by
    # its own magnitude, so near-zero elements' rounding moves weights by up to lr: compare losses only)
    assert tree_stats.policy_loss == pytest.approx(full_stats.policy_loss, abs=1e-5)
    row = len(turns_block(0, seq.ids, [(t.prompt_len, t.candidates) for t in seq.turns]).ids)
    m = stats.as_metrics()
    assert m["update/trunk_tokens"] == 2 * row            # the trunk once per sequence
    assert m["update/tokens"] == 2 * 2 * row              # the top in both epochs
    assert m["update/tokens_per_sequence"] == row
    assert full_stats.as_metrics()["update/trunk_tokens"] == 2 * 3 * row  # old-log-prob pass + 2 epochs
    assert 0 < m["update/candidate_token_share"] < 1
    assert m["update/tflop"] < full_stats.as_metrics()["update/tflop"]
    for phase in ("trunk", "forward", "backward", "optimizer"):
        assert m[f"time/update_{phase}"] > 0
    assert m["tokens_per_s/update"] > 0 and m["gflops_per_s/update"] > 0
