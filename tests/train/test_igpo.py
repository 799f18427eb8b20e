"""IGPO: the pure pieces by hand, the teacher-forced score equals a plain forward pass (tiny model), the
search env's ground-truth hook, and on the search env a turn that retrieves the supporting document earns
more information gain than one that does not (the embedded SmolLM2: a random model cannot read)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agentgym.chat import ChatFormat
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.engine.rollout import RolloutConfig, ground_truth, rollout
from agentgym.train.estimators import igpo

CHAT = ChatFormat.simple()


def test_ground_truth_hook():
    assert ground_truth({"ground_truth": ["Paris", "paris"]}) == "Paris"
    assert ground_truth({"ground_truth": "42"}) == "42" and ground_truth({}) == ""


def test_search_env_exposes_its_answer_and_the_rollout_records_it():
    [traj] = rollout("agentgym/Search-1Hop-v0", ScriptedPolicy(lambda ctx: ctx.env.oracle_action()), CHAT, [0],
                     config=RolloutConfig(max_turns=3))
    assert traj.success and traj.ground_truth and traj.ground_truth in traj.turns[-1].action


def test_answer_probe_masks_only_the_answer():
    ids, mask = igpo.answer_probe(CHAT, "Vrouce Orchestra")
    assert CHAT.decode([i for i, m in zip(ids, mask) if m]).strip() == "Vrouce Orchestra"
    assert CHAT.decode(ids).replace(" ", "").startswith("<answer>") and 0 < mask.sum() < len(ids)


def test_gains_and_reward_component():
    np.testing.assert_allclose(igpo.gains_from_scores(np.log([0.2, 0.5]), np.log([0.4, 0.25])),
                               [np.log(2), np.log(0.5)])
    np.testing.assert_allclose(igpo.gains_from_scores(np.log([0.2, 0.5]), np.log([0.4, 0.25]), "prob"), [0.2, -0.25])
    with pytest.raises(ValueError, match="logprob"):
        igpo.gains_from_scores(np.zeros(1), np.zeros(1), "bits")
    [traj] = rollout("agentgym/Toy-KeyDoor-v0", ScriptedPolicy(lambda ctx: "left"), CHAT, [0],
                     config=RolloutConfig(max_turns=3))
    [shaped] = igpo.with_info_gain([traj], [np.array([0.5, -1.0, 0.0])], coef=0.1)
    assert [k.reward_components["info_gain"] for k in shaped.turns] == [0.5, -1.0, 0.0]
    np.testing.assert_allclose([k.reward for k in shaped.turns],
                               [k.reward + d for k, d in zip(traj.turns, [0.05, -0.1, 0.0])])


def test_teacher_forced_score_matches_a_plain_forward_on_the_tiny_model(tmp_path: Path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.train.tiny import build_tiny

    path = build_tiny(tmp_path / "tiny")
    model, tok = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    chat = ChatFormat.from_tokenizer(tok)
    [traj] = rollout("agentgym/Toy-KeyDoor-OneWord-v0", ScriptedPolicy(lambda ctx: "left", chat=chat), chat, [0],
                     config=RolloutConfig(max_turns=3))
    traj = replace(traj, ground_truth="key")
    [gains] = igpo.info_gains(chat, [traj], _scorer(model, tok.pad_token_id, micro_batch_size=2))
    probe, mask = igpo.answer_probe(chat, "key")

    @torch.no_grad()
    def score(ctx):  # mean log-prob of the answer's tokens by a plain full-vocabulary forward pass
        ids = torch.tensor([[*ctx, *probe]])
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
        pos = np.flatnonzero(mask) + len(ctx) - 1
        return float(logp[pos, ids[0, pos + 1]].mean())

    expected = [score(after) - score(before) for before, after in igpo.turn_contexts(chat, traj)]
    assert len(gains) == 3 and gains[-1] == 0.0
    np.testing.assert_allclose(gains[:-1], expected, atol=1e-4)
    assert np.all(gains[:-1] != 0)


def test_igpo_in_a_trainer_iteration_on_the_search_env(tmp_path: Path, monkeypatch):
    """The tiny model on the search env (its words read as [UNK]): the hook scores every non-final turn
    and the gains reach the rollout-free parts as a reward component."""
    pytest.importorskip("transformers")
    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import Trainer

    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path}", "rollout.env=agentgym/Search-1Hop-v0",
                                       "rollout.env_kwargs={}", "rollout.max_turns=2", "rollout.groups=1",
                                       "rollout.group_size=2", "rollout.max_new_tokens=4",
                                       "rollout.max_context_tokens=2048", "eval.every=0", "train.iterations=1",
                                       "algorithm.igpo.coef=1.0", "algorithm.estimator=hgpo"])
    seen = []
    trainer = Trainer(cfg)
    original = igpo.with_info_gain

    def spy(trajs, gains, coef):
        out = original(trajs, gains, coef)
        seen.extend(out)
        return out

    monkeypatch.setattr(igpo, "with_info_gain", spy)
    trainer.run()
    [m] = read_metrics(tmp_path)
    multi = [t for t in seen if t.num_turns > 1]
    assert m["igpo/scored_turns"] == sum(t.num_turns - 1 for t in multi)
    assert all("info_gain" in k.reward_components for t in seen for k in t.turns)
    assert multi  # the tiny model's garbage never answers, so episodes run to the turn limit
    assert any(k.reward_components["info_gain"] != 0 for t in multi for k in t.turns[:-1])


def _call(name, args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


@pytest.mark.slow
def test_retrieving_the_supporting_doc_earns_more_information_gain():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from agentgym.errors import PolicyError
    from agentgym.policies.hf import HFPolicy
    from agentgym.policies.models import embedded_gguf_path

    try:
        embedded_gguf_path("smollm2-135m-instruct")
    except PolicyError as exc:
        pytest.skip(str(exc))
    policy = HFPolicy.from_pretrained("smollm2-135m-instruct", device="cpu")
    chat = policy.chat_format()
    oracle = ScriptedPolicy(lambda ctx: ctx.env.oracle_action(), chat=chat)
    # first turn searches for something unrelated, then the same oracle steps
    off_topic = ScriptedPolicy(lambda ctx: _call("search", {"query": "weather report", "k": 3})
                               if ctx.observation.startswith("Question") else ctx.env.oracle_action(), chat=chat)
    config = RolloutConfig(max_turns=3)
    good = rollout("agentgym/Search-1Hop-v0", oracle, chat, [2], config=config)
    bad = rollout("agentgym/Search-1Hop-v0", off_topic, chat, [2], config=config)
    assert good[0].ground_truth == bad[0].ground_truth != ""
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    g_good, g_bad = igpo.info_gains(chat, good + bad, _scorer(policy.model, pad))
    # the retrieving turn raises the answer's log-prob; the off-topic search does not, and the retrieval
    # that follows it in the other episode is where that episode's gain lands
    assert g_good[0] > 0.5 and g_good[0] > g_bad[0] + 0.5 and g_bad[1] > g_bad[0]


def _scorer(model, pad_id, micro_batch_size=8):
    """IGPO's belief scores with `model` on the CPU, as the token learner binds them."""
    import torch

    from agentgym.train.updaters.token_ppo import answer_logprobs

    return lambda contexts, probe, mask: answer_logprobs(model, contexts, probe, mask, torch.device("cpu"), pad_id,
                                                         1.0, micro_batch_size)
