"""Token PPO's packed micro-batches (train/updaters/token_rows.py, `train.token_budget`) on the tiny Llama: the
packed row gives every action token's log-prob, entropy and gradient as the padded forward does (measured in
float32: log-probs 2.1e-6, entropies 1.3e-6, gradients 5.9e-7 of each tensor's largest; asserted at 1e-5 / 1e-5 /
1e-4), a whole PPO update with and without packing leaves the same weights (see that test for the measured
figures), no padding is run, a sample longer than
the budget gets a row of its own, and what packing cannot run (a critic) is refused."""
from __future__ import annotations

import copy
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.train.batch import Sample, Scored, Targets  # noqa: E402
from agentgym.train.updaters import token_ppo  # noqa: E402
from agentgym.train.updaters.token_rows import (PackedTokens, budget_micro_batches,  # noqa: E402
                                                packed_forward, prefix_order, refuse_unsupported)

CPU = torch.device("cpu")


@pytest.fixture()
def tiny(tmp_path):
    from transformers import AutoModelForCausalLM

    from agentgym.train import tiny as T

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(T.build_tiny(tmp_path / "tiny", layers=2, hidden=64))).eval()


def _sample(ids, actions):
    """A sample whose tokens at `actions` (index ranges) are actions of turns 0, 1, ..."""
    ids = np.asarray(ids, dtype=np.int64)
    row = np.full(len(ids), -1, dtype=np.int64)
    for turn, (a, b) in enumerate(actions):
        row[a:b] = turn
    return Sample(ids, row, np.zeros(len(ids)))


@pytest.fixture()
def samples():
    """Five free-text samples of mixed lengths; the first two share a 12-token prompt (a group's task)."""
    rng = np.random.default_rng(1)
    prompt = rng.integers(3, 18, 12).tolist()
    return [_sample(prompt + rng.integers(3, 18, 9).tolist(), [(12, 16), (18, 21)]),
            _sample(prompt + rng.integers(3, 18, 5).tolist(), [(12, 17)]),
            _sample(rng.integers(3, 18, 30).tolist(), [(8, 14), (20, 30)]),
            _sample(rng.integers(3, 18, 7).tolist(), [(3, 7)]),
            _sample(rng.integers(3, 18, 16).tolist(), [(10, 16)])]


def _loss(f):
    weights = torch.linspace(-1.0, 1.0, f.logprobs.numel()).reshape(f.logprobs.shape)
    return (f.logprobs * f.mask * weights).sum() + 0.1 * f.entropy.sum()


def _grads(model, f):
    model.zero_grad(set_to_none=True)
    _loss(f).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_packed_forward_gives_the_padded_log_probs_entropies_and_gradients(tiny, samples):
    index = list(range(len(samples)))
    plain = token_ppo.forward(tiny, None, samples, index, CPU, 0.7, 0, want_entropy=True)
    *figures, tokens = packed_forward(tiny, samples, index, CPU, 0.7, 0, want_entropy=True)
    packed = token_ppo.Forward(figures[0], figures[1], None, figures[2])
    assert tokens == sum(len(s) for s in samples) - 12      # every token once; the shared prompt once
    assert torch.equal(plain.mask, packed.mask)
    lp_diff = (plain.logprobs - packed.logprobs).abs().max().item()
    assert lp_diff < 1e-5, lp_diff
    assert (plain.entropy - packed.entropy).abs().max().item() < 1e-5
    a, b = _grads(tiny, plain), _grads(tiny, packed)
    assert a.keys() == b.keys() and len(a) > 10
    worst = max(((a[n] - b[n]).abs().max() / a[n].abs().max().clamp(min=1e-12)).item() for n in a)
    assert worst < 1e-4, worst


def test_budget_micro_batches_keep_order_and_give_a_long_sample_its_own_row(samples):
    lengths = [len(s) for s in samples]                      # 21, 17, 30, 7, 16
    assert lengths == [21, 17, 30, 7, 16]
    assert budget_micro_batches(samples, range(5), 40) == [[0, 1], [2, 3], [4]]
    assert budget_micro_batches(samples, range(5), 25) == [[0], [1], [2], [3, 4]]   # 30 > 25: alone
    stats = PackedTokens()
    stats.add([30], 30, 25)
    stats.add([7, 16], 23, 25)
    m = stats.as_metrics()
    assert m["update/own_row_sequences"] == 1.0 and m["update/padding_share"] == 0.0
    assert m["update/tokens_per_micro_batch"] == 26.5
    assert m["update/padded_layout_padding_share"] == pytest.approx(1 - 53 / (30 + 32))


def test_samples_sharing_a_prefix_are_packed_side_by_side(tiny, samples):
    """A branch (its trunk's first turns copied) and its trunk, shuffled apart in the mini-batch, land in one
    packed row: the copied prefix runs once, and the row's log-probs are still each sample's own."""
    rng = np.random.default_rng(2)
    trunk = samples[2]
    branch = _sample(trunk.ids[:20].tolist() + rng.integers(3, 18, 8).tolist(), [(20, 28)])  # copies 20 tokens
    batch = [trunk, samples[3], samples[4], branch]
    shuffled = [0, 1, 2, 3]                                  # the trunk first, its branch last
    assert budget_micro_batches(batch, shuffled, 60) == [[0, 1, 2], [3]]   # apart: nothing shared
    rows = budget_micro_batches(batch, prefix_order(batch, shuffled), 60)
    assert rows == [[2, 0, 3], [1]]                          # 16 + 30 + the branch's 8 new tokens <= 60
    budget = types.SimpleNamespace(token_budget=60)
    assert token_ppo._micro_batches(batch, shuffled, budget, None) == rows   # the update cuts them so
    fed = sum(packed_forward(tiny, batch, r, CPU, 1.0, 0)[-1] for r in rows)
    assert fed == sum(len(s) for s in batch) - 20            # the copied 20 tokens once
    plain = token_ppo.forward(tiny, None, batch, rows[0], CPU, 1.0, 0)
    packed = packed_forward(tiny, batch, rows[0], CPU, 1.0, 0)[0]
    assert (plain.logprobs - packed).abs().max().item() < 1e-5


def test_packing_refuses_a_critic_and_distributed_runs():
    with pytest.raises(ValueError, match="unset train.token_budget"):
        refuse_unsupported(object(), None)
    with pytest.raises(ValueError, match="distributed"):
        refuse_unsupported(None, object())


@pytest.mark.slow
@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_a_whole_update_with_packing_leaves_the_padded_updates_weights(tiny, samples, dtype, tolerance,
                                                                       choice_components):
    """Four AdamW steps. In float64 the weights agree to 2.7e-16 (the same sums up to rounding); in float32 to
    4.8e-6 of 4.0e-3 moved: Adam divides each gradient by its own running size, so an entry whose gradient is
    rounding noise in both runs moves by a step of noise (the gradients themselves agree to ~1e-7)."""
    from agentgym.train.config import load_config

    tiny = tiny.to(dtype)
    reference = copy.deepcopy(tiny)
    with torch.no_grad():                                     # a reference that differs, so KL has gradients
        for p in reference.parameters():
            p.add_(0.01 * torch.randn_like(p))
    rng = np.random.default_rng(2)
    adv = [np.where(s.mask[1:], rng.normal(size=len(s) - 1), 0.0) for s in samples]
    targets = Targets(adv, None, None, [np.maximum(s.row[1:], 0) for s in samples])
    after, metrics = {}, {}
    for budget in (None, 40):
        cfg = load_config(None, ["train.mini_batches=2", "train.micro_batch_size=2", "train.ppo_epochs=2",
                                 "optim.lr=1e-3", "algorithm.regularisers.kl_coef=0.1",
                                 "algorithm.regularisers.entropy_coef=0.01",
                                 *([f"train.token_budget={budget}"] if budget else [])])
        model = copy.deepcopy(tiny)
        c = choice_components(cfg, model, reference)   # the trainer's Components (conftest)
        scored = token_ppo.score(c, samples, cfg)
        if budget:   # the no-grad scoring pass packs too: old and reference log-probs as the padded pass's
            plain = token_ppo.score(c, samples, load_config(None, []))
            for got, want in ((scored.old_logprobs, plain.old_logprobs), (scored.ref_logprobs, plain.ref_logprobs)):
                assert max(np.abs(a - b).max() for a, b in zip(got, want)) < 1e-5
        stats = token_ppo.ppo_update(c, samples, scored, targets, cfg, shuffle_seed=3)
        after[budget], metrics[budget] = {n: p.detach().clone() for n, p in model.named_parameters()}, stats.as_metrics()
    moved = max((after[None][n] - tiny.state_dict()[n]).abs().max().item() for n in after[None])
    diff = max((after[None][n] - after[40][n]).abs().max().item() for n in after[None])
    assert moved > 1e-3 and diff < tolerance, (moved, diff)
    assert metrics[40]["update/padding_share"] == 0.0 and metrics[40]["update/micro_batches"] >= 4
    assert metrics[40]["update/padded_layout_padding_share"] > 0.0 and "update/padding_share" not in metrics[None]
    # the loss is the same sum, and the logged means are over action tokens, so any micro-batch layout gives them
    for key in ("policy_loss", "kl", "entropy", "approx_kl", "clip_fraction"):
        assert metrics[40][key] == pytest.approx(metrics[None][key], rel=1e-5, abs=1e-7), key
    assert metrics[None]["kl"] > 0 and metrics[None]["approx_kl"] > 0


def test_scored_old_logprobs_arrive_unpadded(tiny, samples, choice_components):
    from agentgym.train.config import load_config

    cfg = load_config(None, ["train.token_budget=25"])
    scored = token_ppo.score(choice_components(cfg, tiny, ref=None), samples, cfg)
    assert [len(a) for a in scored.old_logprobs] == [len(s) - 1 for s in samples]
    assert isinstance(scored, Scored) and scored.ref_logprobs is None


@pytest.mark.parametrize("overrides,says", [
    (["train.token_budget=0"], "must be >= 1"),
    (["train.token_budget=512", "model.critic=separate"], "unset train.token_budget, or set model.critic=none"),
])
def test_the_config_refuses_what_packing_cannot_run(overrides, says):
    from agentgym.errors import ConfigError
    from agentgym.train.config import load_config
    from agentgym.train.updaters import refuse_unsupported as refuse_config

    with pytest.raises(ConfigError, match=says):
        refuse_config(load_config(None, overrides))
    refuse_config(load_config(None, ["train.token_budget=512"]))   # free generation, no critic: runs
    refuse_config(load_config(None, ["train.token_budget=512", "rollout.action_mode=admissible"]))  # caps its rows
