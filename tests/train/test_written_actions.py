"""The choice update with written candidates (a filled action template, `Choice.written`): the action's
log-probability is the choice's plus the writing's, the packed pass gives it as each episode's own row does,
and the warm start teaches the shop's written searches (on the first page the only candidate)."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.train.updaters.choice_ppo import ChoiceSequence, ChoiceTurn, sequence_choice_logprobs  # noqa: E402
from agentgym.train.updaters.choice_rows import (action_logprob, choice_part, packed_block,  # noqa: E402
                                                 packed_choice_logprobs, packed_written, turn_logprobs)

CPU = torch.device("cpu")


def test_turn_logprobs_add_the_writing_to_the_written_candidate():
    totals = torch.tensor([-3.0, -1.0, -2.0, -0.5, -4.0])
    plain, written = turn_logprobs(totals, [3, 2], 1.0, [None, 1])
    assert plain.shape == (3,) and written.shape == (3,)          # the second turn: 2 candidates + the writing
    choice = torch.log_softmax(torch.tensor([-0.5, -4.0]), -1)
    turn = ChoiceTurn(0, 1, ((1,), (2,)), chosen=1, written=1)
    assert torch.allclose(choice_part(written, turn), choice)
    assert float(action_logprob(written, turn)) == pytest.approx(float(choice[1]) - 4.0)   # chose it, wrote it
    assert float(action_logprob(written, turn, 0)) == pytest.approx(float(choice[0]))      # a listed one: the choice
    # T divides the choice's scores only; the writing is the text's own likelihood
    hot = turn_logprobs(totals, [3, 2], 2.0, [None, 1])[1]
    assert float(hot[-1]) == -4.0 and float(hot[:2].exp().sum()) == pytest.approx(1.0)
    assert math.isclose(float(plain.exp().sum()), 1.0, rel_tol=1e-6)


@pytest.fixture()
def written_group(tiny_choice):
    """Two episodes of one task whose first turn wrote candidate 0 (a search) and chose it; their second turns
    part, one of them choosing a listed action on a turn that also wrote one."""
    model, tok, _ = tiny_choice
    from agentgym.policies.admissible import AdmissiblePolicy

    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    cands = tuple(map(tuple, policy.candidate_ids(["take key door", "left", "right", "open door"])))
    p1 = chat.initial_prompt("Take the key.", "room 0 . key here .")
    p2 = chat.continue_prompt(p1, list(cands[0]), "room 0 . door here .")
    p2b = chat.continue_prompt(p1, list(cands[0]), "room 1 . empty .")
    seqs = [ChoiceSequence(tuple(p2), (ChoiceTurn(0, len(p1), cands[:1], 0, 0, written=0),
                                       ChoiceTurn(1, len(p2), cands, 0, 0, written=0))),
            ChoiceSequence(tuple(p2b), (ChoiceTurn(2, len(p1), cands[:1], 0, 1, written=0),
                                        ChoiceTurn(3, len(p2b), cands, 2, 1, written=0)))]
    return model, seqs


def _full_forward_total(model, prompt, cand):
    with torch.no_grad():
        ref = torch.log_softmax(model(input_ids=torch.tensor([list(prompt) + list(cand)])).logits[0].float(), -1)
    return sum(float(ref[len(prompt) - 1 + j, cand[j]]) for j in range(len(cand)))


def test_the_writing_entry_is_the_written_texts_likelihood_and_packing_keeps_it(written_group):
    model, seqs = written_group
    plain = [sequence_choice_logprobs(model, s, CPU) for s in seqs]
    first = seqs[0].turns[0]
    # a lone written candidate: the choice is certain (log 1), the writing is its text's log-likelihood
    want = _full_forward_total(model, seqs[0].ids[:first.prompt_len], first.candidates[0])
    assert float(plain[0][0][0].detach()) == pytest.approx(0.0, abs=1e-6)
    assert float(action_logprob(plain[0][0], first).detach()) == pytest.approx(want, abs=1e-4)
    block = packed_block(seqs, [0, 1])
    packed = packed_choice_logprobs(model, block, CPU, 1.0, written=packed_written(seqs, [0, 1], block))
    for p, q in zip(packed, plain):
        for a, b in zip(p, q):
            assert a.shape == b.shape and float((a - b).detach().abs().max()) < 2e-5

    def grads(logps):
        model.zero_grad(set_to_none=True)
        sum(action_logprob(lp, t) for lps, s in zip(logps, seqs) for lp, t in zip(lps, s.turns)).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    g_packed, g_plain = grads(packed), grads([sequence_choice_logprobs(model, s, CPU) for s in seqs])
    assert any(float(g.abs().max()) > 0 for g in g_plain.values())  # the lone written turn trains too
    for name, g in g_plain.items():
        assert torch.allclose(g_packed[name], g, atol=1e-5, rtol=0), name


def test_the_shop_warm_start_teaches_its_written_searches(tmp_path):
    """sft.objective=choice on the web shop: the fair shopper's search[...] fills the page's template, so its
    first turn is a written candidate (alone on the search page) whose text the loss trains."""
    from agentgym.chat import ChatFormat
    from agentgym.train.config import load_config
    from agentgym.train.sft.data import expert_choice_sequences
    from agentgym.train.sft.run import choice_step
    from agentgym.train.setup import load_model

    cfg = load_config("web_shop_cpu", [f"train.run_dir={tmp_path}", "model.policy=tiny:keydoor", "sft.episodes=2",
                                       "rollout.env_kwargs.num_products=200", "model.train_layers=0",
                                       "sft.max_turns=12"])
    assert cfg.rollout.action_mode == "admissible" and cfg.sft.objective == "choice"  # the preset as it stands
    model, tok = load_model(cfg, tmp_path)
    seqs, stats = expert_choice_sequences(cfg, ChatFormat.from_tokenizer(tok))
    assert stats["demo_success"] == 1.0
    turns = [t for s in seqs for t in s.turns]
    written = [t for t in turns if t.written is not None]
    assert written and all(len(t.candidates) == 1 and t.chosen == 0 for t in written)  # the search page
    assert any(len(t.candidates) > 1 for t in turns if t.written is None)  # results and item pages: clicks
    lone = [i for i, s in enumerate(seqs) if s.turns[0].written is not None][:1]
    model.zero_grad(set_to_none=True)
    loss, turns, best = choice_step(model, [seqs[lone[0]]], [0], CPU)
    assert loss > 0 and turns >= 1   # the written text's NLL: a lone choice alone would give 0
    assert any(p.grad is not None and float(p.grad.abs().max()) > 0 for p in model.parameters())


def test_the_exact_kl_reads_the_choice_and_k1_the_writing_too():
    from agentgym.train.updaters.choice_ppo import choice_kl

    turn = ChoiceTurn(0, 1, ((1,), (2,)), chosen=0, written=0)
    new = turn_logprobs(torch.tensor([-1.0, -3.0]), [2], 1.0, [0])
    ref = turn_logprobs(torch.tensor([-2.0, -3.0]), [2], 1.0, [0])
    p, r = choice_part(new[0], turn), choice_part(ref[0], turn)
    assert float(choice_kl(new, ref, [turn], "exact")[0]) == pytest.approx(float((p.exp() * (p - r)).sum()))
    # k1 at the sent action: the choice's log-ratio plus the writing's (-1 - -2)
    assert float(choice_kl(new, ref, [turn], "k1")[0]) == pytest.approx(float(p[0] - r[0]) + 1.0)
