"""Worked examples for train/updaters/losses.py (numbers by hand in the comments)."""
from __future__ import annotations

import math

import pytest
import torch

from agentgym.train.updaters import losses as L

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
M = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize("agg,expected", [
    ("token-mean", 7 / 3),                 # (1+2+4)/3
    ("seq-mean-token-mean", 2.75),        # ((1+2)/2 + 4/1) / 2
    ("seq-mean-token-sum", 3.5),          # (3 + 4) / 2
    ("seq-mean-token-sum-norm", 7 / 6),   # 7 / (2*3)
])
def test_aggregate(agg, expected):
    assert L.aggregate(X, M, agg).item() == pytest.approx(expected)


def test_denom_makes_micro_batches_sum_to_the_batch():
    full = L.aggregate(X, M, "token-mean")
    parts = sum(L.aggregate(X[i:i + 1], M[i:i + 1], "token-mean", denom=3.0) for i in range(2))
    assert parts.item() == pytest.approx(full.item())


def test_ppo_token_clip_and_dual_clip():
    lp = torch.log(torch.tensor([[1.5, 1.5, 0.5]]))
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, -1.0]])
    mask = torch.ones(1, 3)
    out = L.ppo_policy_loss(lp, old, adv, mask, agg="seq-mean-token-sum")
    # A=+1, r=1.5: max(-1.5, -1.2) = -1.2 (clipped); A=-1, r=1.5: max(1.5, 1.2) = 1.5;
    # A=-1, r=.5: max(.5, .8) = .8 (clipped)
    assert out.loss.item() == pytest.approx(-1.2 + 1.5 + 0.8)
    assert out.clip_fraction == pytest.approx(2 / 3)
    dual = L.ppo_policy_loss(lp, old, adv, mask, agg="seq-mean-token-sum", dual_clip=1.4)
    assert dual.loss.item() == pytest.approx(-1.2 + 1.4 + 0.8)  # 1.5 capped at 1.4 * |A|
    with pytest.raises(ValueError, match="dual_clip"):
        L.ppo_policy_loss(lp, old, adv, mask, dual_clip=0.5)


def test_sequence_and_turn_ratios_are_geometric_means():
    lp = torch.log(torch.tensor([[1.1, 0.9, 2.0, 7.0]])).requires_grad_()
    old = torch.zeros(1, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the 4th token is an observation token
    seq = L.log_ratio(lp, old, mask, "sequence")
    g = (math.log(1.1) + math.log(0.9) + math.log(2.0)) / 3
    torch.testing.assert_close(seq, torch.tensor([[g, g, g, 0.0]]))
    turns = torch.tensor([[0, 0, 1, 1]])
    tr = L.log_ratio(lp, old, mask, "turn", turns)
    t0 = (math.log(1.1) + math.log(0.9)) / 2
    torch.testing.assert_close(tr, torch.tensor([[t0, t0, math.log(2.0), 0.0]]))
    # gradient of the sequence ratio: d r / d lp_j = r / 3 on each of the 3 action tokens
    adv = torch.ones(1, 4)
    out = L.ppo_policy_loss(lp, old, adv, mask, ratio_level="sequence", clip_low=10, clip_high=10,
                            agg="seq-mean-token-mean")
    out.loss.backward()
    r = math.exp(g)
    torch.testing.assert_close(lp.grad, torch.tensor([[-r / 3, -r / 3, -r / 3, 0.0]]))
    with pytest.raises(ValueError, match="segments"):
        L.log_ratio(lp, old, mask, "turn")


def test_kl_estimators():
    lp, ref = torch.tensor([0.0]), torch.tensor([math.log(0.5)])
    assert L.kl_penalty(lp, ref, "k1").item() == pytest.approx(math.log(2))
    assert L.kl_penalty(lp, ref, "k3").item() == pytest.approx(0.5 + math.log(2) - 1)
    assert L.kl_penalty(lp, lp, "k3").item() == 0.0
    with pytest.raises(ValueError, match="k2"):
        L.kl_penalty(lp, ref, "k2")


def test_value_loss_clipping():
    v, old, ret, m = torch.tensor([[1.0]]), torch.tensor([[0.5]]), torch.tensor([[2.0]]), torch.ones(1, 1)
    # unclipped (1-2)^2 = 1; clipped V = .7: (.7-2)^2 = 1.69; max -> 1.69, halved
    assert L.value_loss(v, old, ret, m, clip=0.2).item() == pytest.approx(0.845)
    assert L.value_loss(v, old, ret, m, clip=None).item() == pytest.approx(0.5)


def test_entropy_and_token_logprobs():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0]]])
    assert L.entropy_from_logits(logits).item() == pytest.approx(math.log(4))
    logits = torch.tensor([[[2.0, 0.0]]])
    lp = L.token_logprobs(logits, torch.tensor([[0]]), temperature=2.0)  # softmax(1, 0)[0]
    assert lp.item() == pytest.approx(1 - math.log(math.e + 1))


# ------------------------------------------------------------------------------ decoupled PPO (async)

def test_decoupled_ppo_is_the_clipped_surrogate_against_the_proximal_policy_weighted_by_the_capped_behaviour_ratio():
    import numpy as np

    from agentgym.train.estimators.targets import truncated_is_weights
    from agentgym.train.updaters.losses import behaviour_weights, decoupled_ppo_loss, ppo_policy_loss

    g = torch.Generator().manual_seed(0)
    prox = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 2
    behav = prox + torch.randn(3, 5, generator=g, dtype=torch.float64)  # a stale behaviour policy
    behav[0, 1] = float("nan")  # a sampler that reported no log-prob there: weight 1
    logp = (prox + 0.1 * torch.randn(3, 5, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(3, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(3, 5, dtype=torch.float64)
    mask[2, 3:] = 0
    w = behaviour_weights(prox, behav, mask, cap=2.0)
    expected = torch.exp(torch.clamp(prox - behav, max=np.log(2.0)))
    expected[0, 1] = 1.0
    expected[2, 3:] = 1.0
    assert torch.allclose(w, expected) and float(w.max()) <= 2.0 + 1e-12
    # the trainer's numpy path (targets.truncated_is_weights on the scored and the rollout log-probs) agrees
    np_w = truncated_is_weights(prox.numpy(), behav.numpy(), mask.numpy().astype(bool), 2.0)
    assert np.allclose(np_w, w.numpy())
    out = decoupled_ppo_loss(logp, prox, behav, adv, mask, cap=2.0, clip_low=0.2, clip_high=0.28)
    ref = ppo_policy_loss(logp, prox, adv, mask, clip_low=0.2, clip_high=0.28, weights=expected)
    assert torch.allclose(out.loss, ref.loss)
    # by hand: mean over masked tokens of w * max(-A r, -A clip(r))
    r = torch.exp(logp - prox)
    by_hand = (expected * torch.maximum(-adv * r, -adv * r.clamp(0.8, 1.28)) * mask).sum() / mask.sum()
    assert torch.allclose(out.loss, by_hand)
    out.loss.backward()  # the gradient flows through π_θ only; the weight is a constant
    assert logp.grad is not None and not w.requires_grad


def test_decoupled_ppo_with_fresh_data_is_plain_ppo_and_a_cap_below_one_is_refused():
    from agentgym.train.updaters.losses import behaviour_weights, decoupled_ppo_loss, ppo_policy_loss

    prox = torch.tensor([[-1.0, -2.0, -0.5]])
    logp = torch.tensor([[-0.9, -2.2, -0.4]])
    adv, mask = torch.tensor([[1.0, -1.0, 0.5]]), torch.ones(1, 3)
    out = decoupled_ppo_loss(logp, prox, prox.clone(), adv, mask, cap=2.0)
    assert torch.allclose(out.loss, ppo_policy_loss(logp, prox, adv, mask).loss)
    with pytest.raises(ValueError, match="cap"):
        behaviour_weights(prox, prox, mask, cap=0.5)
