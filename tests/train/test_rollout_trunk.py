"""The rollout's own trunk output reused by the choice update (policies/rollout_trunk.py): the pieces kept
while scoring make the update row's trunk within summation order of a fresh trunk pass, the update's loss
and gradients match, and a stale (trunk weights changed), missing or uncaptured piece is refused."""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.train.setup import freeze_below_top_layers  # noqa: E402
from agentgym.train.updaters.choice_ppo import (ChoiceSequence, ChoiceTurn, choice_update,  # noqa: E402
                                                sequence_choice_logprobs, sequence_trunk)

CPU = torch.device("cpu")


@pytest.fixture()
def scored(tmp_path):
    """A 4-layer tiny Llama (top 2 trainable), an admissible policy that scored two turns of one episode
    with keep_trunk (the second turn extends the first's prompt: its trunk extends the first's kept one)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.policies.admissible import AdmissiblePolicy
    from agentgym.train import tiny

    path = tiny.build_tiny(tmp_path / "tiny", layers=4, hidden=64)
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    freeze_below_top_layers(model, 2)
    policy = AdmissiblePolicy(model, AutoTokenizer.from_pretrained(str(path)))
    policy.keep_trunk = True
    chat = policy.chat_format()
    cands = [list(c) for c in policy.candidate_ids(["left", "take key", "open door", "right", "take door"])]
    p1 = chat.initial_prompt("Take the key.", "room 0 . key here . a long room with a door and a key")
    p2 = chat.continue_prompt(p1, cands[1], "room 0 . hold key .")
    policy.candidate_scores(list(p1), cands)
    policy.candidate_scores(list(p2), cands[:4])
    turns = (ChoiceTurn(0, len(p1), tuple(map(tuple, cands)), 1), ChoiceTurn(1, len(p2), tuple(map(tuple, cands[:4])), 2))
    return model, policy, ChoiceSequence(tuple(p2), turns)


def _kept(policy, model, seq):
    return policy.rollout_trunk(model, seq.ids, [(t.prompt_len, t.candidates) for t in seq.turns])


def test_the_kept_trunk_equals_a_fresh_trunk_pass_and_gives_the_same_loss_and_gradients(scored):
    model, policy, seq = scored
    kept = _kept(policy, model, seq)
    fresh = sequence_trunk(model, seq, CPU, tree=False)
    assert kept is not None and kept.start == fresh.start == 2 and kept.ids == fresh.ids
    # measured: 9.5e-6 on hidden states up to 20.8 (the scoring pass reads a KV cache and a dense mask)
    assert torch.allclose(kept.hidden, fresh.hidden, atol=2e-5, rtol=0)
    assert not kept.hidden.is_inference()

    def loss_grads(trunk):
        model.zero_grad(set_to_none=True)
        logps = sequence_choice_logprobs(model, seq, CPU, trunk=trunk)
        loss = -sum(lp[t.chosen] for lp, t in zip(logps, seq.turns))
        loss.backward()
        return float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    loss_kept, g_kept = loss_grads(kept)
    loss_full, g_full = loss_grads(None)
    assert loss_kept == pytest.approx(loss_full, abs=1e-5)
    for name in g_full:
        assert torch.allclose(g_kept[name], g_full[name], atol=1e-5, rtol=1e-4), name


def test_a_changed_trunk_a_missing_turn_or_no_capture_is_refused(scored):
    model, policy, seq = scored
    other = ChoiceSequence(seq.ids, (seq.turns[0], ChoiceTurn(1, seq.turns[1].prompt_len, seq.turns[0].candidates, 0)))
    assert _kept(policy, model, other) is None               # that turn was scored with other candidates
    assert _kept(policy, copy.deepcopy(model), seq) is None  # another model's (a copy's) weights
    assert _kept(policy, model, seq) is not None
    with torch.no_grad():
        model.model.layers[1].self_attn.q_proj.weight.mul_(1.01)  # below the trainable block
    assert _kept(policy, model, seq) is None
    assert policy.trunk.rows_refused == 3 and policy.trunk.rows_served == 1
    policy.keep_trunk = False
    policy.trunk.clear()
    policy.candidate_scores(list(seq.ids), [list(c) for c in seq.turns[1].candidates])
    assert policy.trunk.trees == {}


def test_the_kept_prompts_outlive_the_prefix_stores_kv_within_their_own_budget(scored):
    """The prefix store's budget holds a few long episodes' KV and drops the rest; the trunk keeps the prompts'
    hidden states apart, so the row is still served (and still a fresh pass's); its own budget drops the oldest."""
    model, policy, seq = scored
    policy.free.prefix_store.clear()  # the episode's KV evicted
    kept = _kept(policy, model, seq)
    assert kept is not None
    assert torch.allclose(kept.hidden, sequence_trunk(model, seq, CPU, tree=False).hidden, atol=2e-5, rtol=0)
    policy.trunk.prompts.max_bytes = policy.trunk.prompts.bytes  # room for this prompt: another episode's pushes it out
    other = policy.chat_format().initial_prompt("Open the door.", "room 3 . a door here")
    policy.candidate_scores(list(other), [list(c) for c in seq.turns[1].candidates])
    assert len(policy.trunk.prompts) == 1 and _kept(policy, model, seq) is None


def test_a_capturing_pass_runs_the_prompt_tokens_whose_trunk_is_not_kept(scored):
    """KV held but trunk output not (kept pieces cleared, or the prompt scored without capture): the pass
    runs the whole prompt instead of reading the KV, so the turn's row can still be served."""
    model, policy, seq = scored
    policy.reuse_scores = False
    prompt, cands = list(seq.ids), [list(c) for c in seq.turns[1].candidates]
    policy.scoring_stats()
    policy.trunk.clear()
    policy.candidate_scores(prompt, cands)
    assert policy.scoring_stats()["prompt_tokens_run"] == len(prompt)
    one_turn = ChoiceSequence(seq.ids, (ChoiceTurn(0, len(prompt), seq.turns[1].candidates, 0),))
    kept = _kept(policy, model, one_turn)
    assert kept is not None
    assert torch.allclose(kept.hidden, sequence_trunk(model, one_turn, CPU, tree=False).hidden, atol=2e-5, rtol=0)
    policy.candidate_scores(prompt, cands)  # now kept: the prompt comes from the KV store again
    assert policy.scoring_stats()["prompt_tokens_run"] == 1


def test_the_update_uses_the_rollouts_trunk_and_matches_recomputing_it(scored, choice_components):
    from agentgym.train.config import load_config

    model, policy, seq = scored
    cfg = load_config("toy_learning", ["train.ppo_epochs=1", "train.mini_batches=1", "optim.lr=1e-3"])

    def update(policy_or_none):
        m = copy.deepcopy(model)
        if policy_or_none is not None:
            policy_or_none.model = policy_or_none.free.model = m  # the policy shares the trained model
        c = choice_components(cfg, m, policy=policy_or_none)
        return choice_update(c, [seq], np.array([1.0, -0.5]), cfg, shuffle_seed=0)

    recomputed = update(None)
    on_copy = update(policy)  # the policy now shares a copy: the kept trunk's stamp is the original's, refused
    assert on_copy.cost.trunk_reused == 0 and on_copy.cost.trunk_tokens > 0
    policy.model = policy.free.model = model
    before = copy.deepcopy(model)
    c = choice_components(cfg, model, policy=policy)  # train the very model the policy scored with
    stats = choice_update(c, [seq], np.array([1.0, -0.5]), cfg, shuffle_seed=0)
    metrics = stats.as_metrics()
    assert metrics["update/trunk_from_rollout_share"] == 1.0 and metrics["update/trunk_tokens"] == 0
    assert stats.policy_loss == pytest.approx(recomputed.policy_loss, abs=1e-5)
    assert metrics["update/tflop"] < recomputed.as_metrics()["update/tflop"]
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), before.parameters()))
