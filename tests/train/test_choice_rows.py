"""The choice update's exact shortcuts (train/updaters/choice_rows.py) on a tiny Llama: a group's episodes in
one packed row give each episode's log-probs and gradients as its own row does (tolerances measured below), and
the update with them equals the plain update; the reference's pass is skipped only while the reference holds the
policy's very weights - after a step, or for a reference that is the model itself, it runs; trunks of other
weights are refused."""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.train.updaters.choice_ppo import (ChoiceSequence, ChoiceTurn, choice_update,  # noqa: E402
                                                sequence_choice_logprobs, sequence_trunk)
from agentgym.train.updaters.choice_rows import (PLAIN, Shortcuts, pack_groups, packed_block,  # noqa: E402
                                                 packed_choice_logprobs, packed_trunk)

CPU = torch.device("cpu")


@pytest.fixture()
def group(tiny_choice):
    """The tiny model and three episodes of one task: all share the task prompt and their first turn; the
    second and third also their second turn, then part (other observations, other candidates)."""
    model, tok, _ = tiny_choice
    from agentgym.policies.admissible import AdmissiblePolicy

    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    cands = tuple(map(tuple, policy.candidate_ids(["left", "take key", "open door", "right", "take door"])))
    p1 = chat.initial_prompt("Take the key.", "room 0 . key here . a door .")
    p2 = chat.continue_prompt(p1, list(cands[1]), "room 0 . hold key .")
    p2b = chat.continue_prompt(p1, list(cands[0]), "room 1 . door here .")
    p3 = chat.continue_prompt(p2b, list(cands[2]), "room 1 . door open .")
    p3b = chat.continue_prompt(p2b, list(cands[3]), "room 2 . empty .")
    first = ChoiceTurn(0, len(p1), cands, 1, 0)
    seqs = [ChoiceSequence(tuple(p2), (first, ChoiceTurn(1, len(p2), cands[:4], 2, 0))),
            ChoiceSequence(tuple(p3), (ChoiceTurn(2, len(p1), cands, 0, 1), ChoiceTurn(3, len(p2b), cands[1:], 1, 1),
                                       ChoiceTurn(4, len(p3), cands, 3, 1))),
            ChoiceSequence(tuple(p3b), (ChoiceTurn(5, len(p1), cands, 0, 2), ChoiceTurn(6, len(p2b), cands[1:], 2, 2),
                                        ChoiceTurn(7, len(p3b), cands[:2], 0, 2)))]
    return model, seqs


ADVANTAGES = np.array([1.0, -0.5, 0.3, 0.8, -1.0, 0.2, -0.4, 0.6])


def _loss(logps_per_seq, seqs):
    """A loss touching every candidate: chosen log-probs weighted by an advantage, plus each turn's entropy."""
    total = 0.0
    for logps, seq in zip(logps_per_seq, seqs):
        for lp, t in zip(logps, seq.turns):
            total = total + float(ADVANTAGES[t.row]) * lp[t.chosen] + 0.1 * (lp.exp() * lp).sum()
    return total


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("with_trunk", [True, False])
def test_the_packed_pass_gives_each_episodes_log_probs_and_gradients(group, with_trunk):
    model, seqs = group
    block = packed_block(seqs, range(len(seqs)))
    assert block.turn_index == ((0, 1), (0, 2, 3), (0, 2, 4)) and len(block.ids) < 0.6 * block.own_tokens
    trunk = packed_trunk(block, [sequence_trunk(model, s, CPU) for s in seqs]) if with_trunk else None
    assert (trunk is not None) == with_trunk
    packed = packed_choice_logprobs(model, block, CPU, 1.0, trunk)
    plain = [sequence_choice_logprobs(model, s, CPU, 1.0) for s in seqs]  # every layer, the dense mask
    diff = max(float((a - b).abs().max()) for p, q in zip(packed, plain) for a, b in zip(p, q))
    assert diff < 2e-5  # measured: 4.8e-6, on log-probs down to -11.3
    g_packed, g_plain = _grads(model, _loss(packed, seqs)), _grads(model, _loss(plain, seqs))
    for name, g in g_plain.items():
        # measured: 1.6e-6 at most, on gradient elements up to 2.1
        assert torch.allclose(g_packed[name], g, atol=1e-5, rtol=0), name


def test_a_packed_trunk_of_other_weights_is_refused(group):
    from agentgym.policies.trunk import StaleTrunkError

    model, seqs = group
    block = packed_block(seqs, range(len(seqs)))
    trunks = [sequence_trunk(model, s, CPU) for s in seqs]
    trunk = packed_trunk(block, trunks)
    with pytest.raises(StaleTrunkError):
        packed_choice_logprobs(copy.deepcopy(model), block, CPU, 1.0, trunk)  # another model's tensors
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight.mul_(1.01)   # a trunk layer changed since
    with pytest.raises(StaleTrunkError, match="changed since"):
        packed_choice_logprobs(model, block, CPU, 1.0, trunk)
    fresh = sequence_trunk(model, seqs[0], CPU)
    assert packed_trunk(block, [fresh, *trunks[1:]]) is None   # members of other weights: not gathered
    assert packed_trunk(block, [None, *trunks[1:]]) is None


def test_the_rows_sharing_most_join_first_within_the_token_budget(group):
    _, seqs = group
    sizes = [len(packed_block(seqs, [i]).ids) for i in range(3)]
    assert pack_groups(seqs, [0, 1, 2], 10_000) == [[0, 1, 2]]
    assert pack_groups(seqs, [0, 1, 2], max(sizes)) == [[0], [1], [2]]   # no room to add any
    from agentgym.policies.packed_rows import common_prefix
    from agentgym.train.updaters.choice_rows import own_tokens

    both = own_tokens(seqs[1]) + own_tokens(seqs[2]) - common_prefix(seqs[1].ids, seqs[2].ids)
    assert pack_groups(seqs, [1, 2, 0], both) == [[1, 2], [0]]          # 0 no longer fits
    assert pack_groups(seqs, [0, 1, 2], both) == [[0], [1, 2]]          # 1 and 2 share most: they join first
    unrelated = ChoiceSequence((99, *seqs[0].ids), seqs[0].turns)
    assert pack_groups([*seqs, unrelated], [0, 3], 10_000) == [[0], [3]]  # nothing shared: its own row


def _config(*extra):
    from agentgym.train.config import load_config

    # SGD: AdamW's first step divides each gradient element by its own magnitude, blowing rounding-sized
    # differences up to lr; SGD moves weights by lr x gradient, so equal gradients mean equal weights
    return load_config("toy_learning", ["rollout.action_mode=admissible", "train.ppo_epochs=1", "train.mini_batches=1",
                                        "optim.optimizer=sgd", "optim.lr=0.1", "algorithm.regularisers.kl_coef=0.5",
                                        "algorithm.regularisers.kl_estimator=exact", *extra])


def _reference(model):
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def _drift(model):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)


@pytest.mark.parametrize("epochs", [1, 2])
def test_the_update_with_shortcuts_equals_the_plain_update(group, choice_components, epochs):
    model, seqs = group
    cfg = _config(f"train.ppo_epochs={epochs}")
    for at_reference in (True, False):  # the first update (reference = policy), a later one (drifted)
        start = copy.deepcopy(model).train()
        if not at_reference:
            _drift(start)
        runs = {}
        for name, shortcuts in (("plain", PLAIN), ("shortcut", Shortcuts())):
            m = copy.deepcopy(start)
            stats = choice_update(choice_components(cfg, m, _reference(model)), seqs, ADVANTAGES, cfg,
                                  shuffle_seed=0, shortcuts=shortcuts)
            runs[name] = (m, stats, stats.as_metrics())
        (plain, _, pm), (short, _, sm) = runs["plain"], runs["shortcut"]
        assert sm["update/reference_reused"] == float(at_reference) and pm["update/reference_reused"] == 0
        assert ("gflop/update_reference" in sm) != at_reference
        assert sm["update/tokens"] < 0.6 * pm["update/tokens"] and sm["update/tflop"] < 0.7 * pm["update/tflop"]
        assert sm["update/packed_token_share"] < 0.6 and pm["update/packed_token_share"] == 1.0
        for key in ("policy_loss", "kl", "entropy", "choice/greedy_pick_share", "choice/picked_prob", "grad_norm"):
            assert sm[key] == pytest.approx(pm[key], rel=1e-5, abs=2e-6), key
        moved = max(float((a - b).abs().max()) for a, b in zip(plain.parameters(), start.parameters()))
        assert moved > 1e-3
        for (name, a), b in zip(plain.named_parameters(), short.parameters()):
            assert torch.allclose(a, b, atol=1e-6, rtol=0), name   # measured: 1.2e-7 at most (steps ~5e-3)


def test_train_token_budget_caps_the_choice_updates_rows(group, choice_components):
    from agentgym.train.updaters.choice_rows import own_tokens

    model, seqs = group

    def update_metrics(*extra):
        cfg = _config(*extra)
        return choice_update(choice_components(cfg, copy.deepcopy(model).train(), _reference(model)), seqs,
                             ADVANTAGES, cfg, shuffle_seed=0).as_metrics()

    packed = update_metrics()   # the default 6,144-token rows
    one_each = update_metrics(f"train.token_budget={max(own_tokens(s) for s in seqs)}")   # room for one episode a row
    assert packed["update/packed_token_share"] < 0.6 and one_each["update/packed_token_share"] == 1.0
    for key in ("policy_loss", "kl", "grad_norm"):
        assert one_each[key] == pytest.approx(packed[key], rel=1e-5, abs=2e-6), key


def test_a_reference_that_is_the_model_itself_is_never_taken_for_the_policy(group, choice_components):
    import contextlib
    import dataclasses

    from agentgym.train.updaters.choice_rows import reference_is_policy

    model, _ = group
    cfg = _config()
    c = choice_components(cfg, model, _reference(model))
    assert reference_is_policy(c)
    # LoRA: the model with its adapters off, the same tensors
    assert not reference_is_policy(dataclasses.replace(c, ref=lambda: contextlib.nullcontext(model)))
    assert not reference_is_policy(dataclasses.replace(c, ref=None))
    other = _reference(model)
    with torch.no_grad():
        next(p for p in other.parameters()).add_(1e-6)   # one element of one tensor
    assert not reference_is_policy(choice_components(cfg, model, other))
