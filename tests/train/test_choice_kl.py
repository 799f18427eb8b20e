"""A KL term toward the reference policy in the choice update (admissible mode): the exact KL over a turn's
candidates and its k1 / k3 estimates; the reference scored on the trained model's cached trunk equals its own
full forward, and a reference whose frozen layers differ is refused; the term is inert where the policy is the
reference and pulls a drifted policy back toward it; options a mode cannot honour are refused."""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.trunk import StaleTrunkError, shares_trunk  # noqa: E402
from agentgym.train.updaters.choice_ppo import (  # noqa: E402
    ChoiceTurn, choice_kl, choice_update, reference_logprobs, sequence_choice_logprobs, sequence_trunk)

CPU = torch.device("cpu")


def _picks(*chosen):
    """Turns of 3 and 2 candidates choosing `chosen` (choice_kl reads the pick and the candidate count)."""
    return [ChoiceTurn(k, 1, ((1,),) * n, c) for k, (n, c) in enumerate(zip((3, 2), chosen))]


def test_exact_kl_sums_over_candidates_and_k1_k3_read_the_pick():
    new = [torch.log_softmax(torch.tensor([2.0, 0.0, -1.0]), -1), torch.log_softmax(torch.tensor([0.0, 1.0]), -1)]
    ref = [torch.log_softmax(torch.tensor([0.0, 0.0, 0.0]), -1), torch.log_softmax(torch.tensor([0.0, 1.0]), -1)]
    exact = choice_kl(new, ref, _picks(0, 1), "exact")
    p = new[0].exp()
    assert exact[0].item() == pytest.approx(float((p * (new[0] - ref[0])).sum()), abs=1e-6) and exact[0] > 0
    assert exact[1].item() == pytest.approx(0.0, abs=1e-7)  # the same distribution: no divergence
    k1 = choice_kl(new, ref, _picks(0, 1), "k1")
    assert k1[0].item() == pytest.approx(float(new[0][0] - ref[0][0]))
    d = float(ref[0][2] - new[0][2])  # k3 = e^d - d - 1 with d = log ref - log new at the pick
    assert choice_kl(new, ref, _picks(2, 1), "k3")[0].item() == pytest.approx(np.exp(d) - d - 1, abs=1e-6)


@pytest.fixture()
def tiny4(tiny_choice):
    """A 4-layer tiny Llama with its top 2 layers trainable and one two-turn choice sequence (conftest.py)."""
    return tiny_choice


def _reference(model):
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def _drift_top(model, scale=0.05, seed=0):
    """Move the trainable top's weights as a few RL steps would (the trunk untouched)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * scale)


def test_the_reference_on_the_models_trunk_equals_its_own_forward_and_other_trunk_weights_are_refused(
        tiny4, choice_components):
    from agentgym.train.config import load_config

    model, _, seq = tiny4
    reference = _reference(model)
    _drift_top(model)  # the trained top differs from the reference's; the trunk is the same
    trunk = sequence_trunk(model, seq, CPU)
    assert trunk is not None and shares_trunk(reference, model)
    c = choice_components(load_config("toy_learning"), model, reference)
    on_trunk = reference_logprobs(c, [seq], [trunk], 1.0)[0]
    with torch.no_grad():
        own = sequence_choice_logprobs(reference, seq, CPU)  # the reference's full forward, its own trunk
        mine = sequence_choice_logprobs(model, seq, CPU, trunk=trunk)
    for a, b, m in zip(on_trunk, own, mine):
        assert torch.allclose(a, b, atol=1e-5)  # tree attention vs the dense product: rounding only
        assert not torch.allclose(a, m, atol=1e-3)  # the reference's top scored, not the model's
    with torch.no_grad():
        next(reference.model.layers[0].parameters()).add_(0.01)  # a frozen layer of the reference moves
    assert not shares_trunk(reference, model)
    with pytest.raises(StaleTrunkError, match="keep the layers below model.train_layers frozen"):
        reference_logprobs(c, [seq], [trunk], 1.0)


def _kl_to(reference, model, seq):
    with torch.no_grad():
        new = sequence_choice_logprobs(model, seq, CPU)
        ref = sequence_choice_logprobs(reference, seq, CPU)
    return float(choice_kl(new, ref, seq.turns, "exact").sum())


@pytest.mark.parametrize("estimator", ["exact", "k3"])
def test_the_kl_term_is_inert_at_the_reference_and_pulls_a_drifted_policy_back(tiny4, estimator,
                                                                               choice_components):
    from agentgym.train.config import load_config

    model, _, seq = tiny4
    def config(*extra):
        return load_config("toy_learning", ["rollout.action_mode=admissible", "train.ppo_epochs=1",
                                            "train.mini_batches=1", "optim.lr=1e-3",
                                            "algorithm.regularisers.entropy_coef=0", *extra])

    kl = ["algorithm.regularisers.kl_coef=1.0", f"algorithm.regularisers.kl_estimator={estimator}"]
    cfg, plain = config(*kl), config()
    advantages = np.array([1.0, -0.5])
    # at the reference: KL 0 and a zero gradient, so the step equals the one without the term (SGD: Adam's
    # first step divides each element by its own magnitude and would blow a rounding-sized gradient up to lr)
    sgd_kl, sgd = config(*kl, "optim.optimizer=sgd", "optim.lr=0.1"), config("optim.optimizer=sgd", "optim.lr=0.1")
    with_kl, without = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    stats = choice_update(choice_components(sgd_kl, with_kl, _reference(model)), [seq], advantages, sgd_kl,
                          shuffle_seed=0)
    choice_update(choice_components(sgd, without, None), [seq], advantages, sgd, shuffle_seed=0)
    assert stats.kl == pytest.approx(0.0, abs=1e-6) and stats.as_metrics()["time/update_reference"] > 0
    moved = [float((a - m).detach().abs().max()) for a, m in zip(without.parameters(), model.parameters())]
    assert max(moved) > 1e-4  # the advantages moved the policy ...
    for a, b in zip(with_kl.parameters(), without.parameters()):
        assert torch.allclose(a, b, atol=1e-7)  # ... and the KL term added nothing to that step
    # drifted and without any advantage: the KL term alone moves the policy back toward the reference
    drifted = copy.deepcopy(model).train()
    _drift_top(drifted, scale=0.2)
    reference = _reference(model)
    before = _kl_to(reference, drifted, seq)
    stats = choice_update(choice_components(cfg, drifted, reference), [seq], np.zeros(2), cfg, shuffle_seed=0)
    assert before > 1e-3
    if estimator == "exact":  # the first epoch scores the rollout's weights: the KL reported is the KL before the step
        assert stats.kl / stats.turns == pytest.approx(before / 2, rel=1e-3)
    assert _kl_to(reference, drifted, seq) < before
    still = copy.deepcopy(model).train()  # no KL term and no advantage: nothing moves
    _drift_top(still, scale=0.2)
    kept = [p.detach().clone() for p in still.parameters()]
    choice_update(choice_components(plain, still, None), [seq], np.zeros(2), plain, shuffle_seed=0)
    assert all(torch.equal(a, b) for a, b in zip(kept, still.parameters()))


def test_a_kl_run_through_the_trainer_scores_a_reference_and_reports_the_kl(tmp_path):
    import json

    from agentgym.train.config import load_config
    from agentgym.train.trainer import Trainer

    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path}", "rollout.action_mode=admissible",
                                       "rollout.max_new_tokens=3", "train.iterations=2", "rollout.groups=2",
                                       "rollout.group_size=4", "eval.every=0", "logging.progress=false",
                                       "model.train_layers=1", "optim.lr=1e-3", "train.mini_batches=1",
                                       "algorithm.regularisers.kl_coef=0.5",
                                       "algorithm.regularisers.kl_estimator=exact"])
    trainer = Trainer(cfg)
    try:
        assert trainer.ref is not None
        trainer.run()
    finally:
        trainer.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the first batch is scored by the reference's weights
    assert rows[1]["kl"] > 0  # one step later the policy has moved away from it
    assert all(r["time/update_reference"] > 0 for r in rows)
