"""Exact PPO on admissible-action choices: the cached per-turn log-probabilities (values and gradients)
equal a brute-force pass per candidate, and turns are paired with the candidates they chose among."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.admissible import AdmissiblePolicy  # noqa: E402
from agentgym.train.updaters.choice_ppo import ChoiceSequence, ChoiceTurn, choice_sequences, sequence_choice_logprobs  # noqa: E402


@pytest.fixture()
def tiny(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.train import tiny

    tiny.register_tiny_envs()
    path = tiny.build_tiny(tmp_path / "tiny")
    return AutoModelForCausalLM.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


def two_turn_sequence(policy):
    """(chat format, a two-turn episode of the toy: `take key` picked, then `open door`)."""
    chat = policy.chat_format()
    cands = tuple(map(tuple, policy.candidate_ids(["left", "take key", "open door"])))
    p1 = chat.initial_prompt("Take the key.", "room 0 . key here .")
    p2 = chat.continue_prompt(p1, list(cands[1]), "room 0 . hold key .")
    return chat, ChoiceSequence(tuple(p2), (ChoiceTurn(0, len(p1), cands, 1), ChoiceTurn(1, len(p2), cands, 2)))


def brute_force(model, ids, turn):
    scores = []
    for c in turn.candidates:
        seq = torch.tensor([list(ids[:turn.prompt_len]) + list(c)])
        lp = torch.log_softmax(model(input_ids=seq).logits[0].float(), -1)
        scores.append(sum(lp[turn.prompt_len - 1 + j, c[j]] for j in range(len(c))))
    return torch.log_softmax(torch.stack(scores), -1)


def test_one_pass_choice_logprobs_equal_brute_force_values_and_gradients(tiny):
    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    cands = tuple(map(tuple, policy.candidate_ids(["left", "take key", "open door", "right"])))
    p1 = chat.initial_prompt("Take the key.", "room 0 . key here .")
    resp = list(cands[1])
    p2 = chat.continue_prompt(p1, resp, "room 0 . hold key .")
    seq = ChoiceSequence(tuple(p2), (ChoiceTurn(0, len(p1), cands, 1), ChoiceTurn(1, len(p2), cands[:3], 2)))
    cached = sequence_choice_logprobs(model, seq, torch.device("cpu"))
    weight = model.get_input_embeddings().weight
    g_cached = torch.autograd.grad(sum(lp[t.chosen] for lp, t in zip(cached, seq.turns)), weight)[0]
    brute = [brute_force(model, seq.ids, t) for t in seq.turns]
    g_brute = torch.autograd.grad(sum(lp[t.chosen] for lp, t in zip(brute, seq.turns)), weight)[0]
    for a, b in zip(cached, brute):
        assert torch.allclose(a, b, atol=1e-4)
        assert torch.allclose(a.exp().sum(), torch.tensor(1.0), atol=1e-5)
    assert torch.allclose(g_cached, g_brute, atol=1e-4)
    assert g_cached.abs().sum() > 0


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_update_distribution_is_the_rollouts_at_any_temperature(tiny, temperature):
    """The rollout samples softmax(s / T) over summed candidate log-likelihoods s; the update must score
    that same distribution (a per-token temperature would make the first ratio differ from 1)."""
    from agentgym.policies.admissible import renormalised

    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    cands = [list(c) for c in policy.candidate_ids(["left", "take key", "open the door", "right"])]
    prompt = policy.chat_format().initial_prompt("Take the key.", "room 0 . key here .")
    sums = [sum(lp) for lp in policy.candidate_scores(list(prompt), cands)]
    expected = torch.log(torch.tensor(renormalised(sums, temperature)))
    seq = ChoiceSequence(tuple(prompt), (ChoiceTurn(0, len(prompt), tuple(map(tuple, cands)), 0),))
    with torch.no_grad():
        got = sequence_choice_logprobs(model, seq, torch.device("cpu"), temperature)[0]
    assert torch.allclose(got, expected.to(got.dtype), atol=1e-4)


def test_choice_sequences_read_the_choice_each_turn_carries(tiny):
    import json

    from agentgym.policies.base import SamplingParams
    from agentgym.engine.rollout import RolloutConfig, rollout
    from agentgym.train.tiny import ONE_WORD_ENV
    from agentgym.trajectory import Trajectory

    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    config = RolloutConfig(max_turns=3, layout="trajectory", sampling=SamplingParams(temperature=1.0, max_tokens=3))
    trajs = rollout(ONE_WORD_ENV, policy, None, [0, 1], 2, config, env_kwargs={"length": 2})
    assert all(k.choice is not None and k.choice.candidates[k.choice.pick] == k.response_ids
               for t in trajs for k in t.turns)
    # the choice survives a JSON round trip (run logs, resume)
    back = [Trajectory.from_dict(json.loads(json.dumps(t.to_dict()))) for t in trajs]
    assert [k.choice for t in back for k in t.turns] == [k.choice for t in trajs for k in t.turns]
    seqs = choice_sequences(back, "trajectory")
    assert len(seqs) == 4
    rows = [t.row for s in seqs for t in s.turns]
    assert rows == list(range(sum(len(t.turns) for t in trajs)))
    for s, traj in zip(seqs, trajs):
        for ct, turn in zip(s.turns, traj.turns):
            assert ct.candidates[ct.chosen] == turn.response_ids
            assert s.ids[:ct.prompt_len] == turn.prompt_ids
    step = choice_sequences(trajs, "step")
    assert len(step) == len(rows) and all(len(s.turns) == 1 for s in step)


def test_a_label_differs_from_the_pick_only_when_asked_for():
    from dataclasses import replace

    from agentgym.policy import Choice
    from agentgym.trajectory import Trajectory, Turn

    turn = Turn(0, "obs", "b", (1, 2), (7, 9), (0.0, 0.0), 0.0, choice=Choice(((5, 9), (7, 9)), pick=1, label=0))
    traj = Trajectory("env", 0, 0, 0, (turn, replace(turn, index=1, choice=None)), False, "truncated")
    assert [t.chosen for s in choice_sequences([traj], "step") for t in s.turns] == [1]
    assert [t.chosen for s in choice_sequences([traj], "step", use_labels=True) for t in s.turns] == [0]


@pytest.mark.parametrize("train_layers", [0, 1])
def test_trainer_updates_through_the_choice_distribution(tmp_path, train_layers, train_device):
    import json

    from agentgym.train.config import load_config
    from agentgym.train.trainer import Trainer

    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path}", "rollout.action_mode=admissible",
                                       "rollout.max_new_tokens=3", "train.iterations=1", "rollout.groups=2",
                                       "rollout.group_size=4", "eval.every=0", "logging.progress=false",
                                       f"model.train_layers={train_layers}", f"model.device={train_device}"])
    trainer = Trainer(cfg)
    try:
        assert isinstance(trainer.policy, AdmissiblePolicy) and trainer.policy.model is trainer.model
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        trainer.run()
        changed = any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    finally:
        trainer.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["choice_turns"] > 0 and row["optimizer_steps"] >= 1 and changed
    assert row["valid_action_rate"] > 0.5  # only listed commands (the toy lists "open door" while locked)
    # where the iteration's time went: rollout scoring, and the update's trunk / top / optimizer split
    assert row["rollout_scoring/turns"] > 0 and row["rollout_scoring/candidate_tokens"] > 0
    assert row["rollout_scoring/prompt_tokens_reused"] > 0  # later turns reuse the episode's prompt KV
    assert row["update/tokens"] > 0 and row["time/update_optimizer"] > 0 and row["gflops_per_s/update"] > 0
    # top layers only: every episode's frozen trunk comes from its own rollout (policies/rollout_trunk.py)
    assert row["update/trunk_from_rollout_share"] == (1.0 if train_layers else 0.0)
    assert row["update/trunk_tokens"] == 0  # reused, or (all layers train) no trunk at all
    # what the update could learn from, and how far sampling was from greedy evaluation
    assert 0 <= row["zero_variance_group_share"] <= 1 and 0 <= row["choice/live_turn_share"] <= 1
    assert 0 < row["choice/greedy_pick_share"] <= 1 and 0 < row["choice/picked_prob"] <= 1


@pytest.mark.parametrize("epochs", [1, 2])
def test_choice_update_ratio_starts_at_one_with_or_without_the_old_pass(tiny, epochs, choice_components):
    """One epoch of one mini-batch skips the no-grad pass (old = new, detached); two epochs run it. Either
    way the first step's ratio is 1, so its loss is minus the turn-mean advantage, and weights move."""
    import numpy as np

    from agentgym.train.updaters.choice_ppo import choice_update
    from agentgym.train.config import load_config

    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    chat, seq = two_turn_sequence(policy)
    cfg = load_config("toy_learning", [f"train.ppo_epochs={epochs}", "train.mini_batches=1", "optim.lr=1e-3",
                                        "algorithm.regularisers.entropy_coef=0"])
    model = copy.deepcopy(model).train()
    c = choice_components(cfg, model, tokenizer=tok, chat=chat)
    before = [p.detach().clone() for p in model.parameters()]
    stats = choice_update(c, [seq], np.array([1.0, -0.5]), cfg, shuffle_seed=0)
    assert stats.steps == epochs and stats.turns == 2 * epochs
    # the sampling figures read the first epoch only (the rollout's weights), whatever the epoch count
    assert stats.first_turns == 2
    with torch.no_grad():
        first = sequence_choice_logprobs(policy.model, seq, torch.device("cpu"))  # the weights before the update
    assert stats.greedy_picks == sum(int(lp.argmax()) == t.chosen for lp, t in zip(first, seq.turns))
    assert stats.picked_prob == pytest.approx(sum(float(lp[t.chosen].exp()) for lp, t in zip(first, seq.turns)),
                                              abs=1e-5)
    if epochs == 1:
        assert stats.policy_loss / stats.turns == pytest.approx(-0.25, abs=1e-6) and stats.clip_fraction == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_advantage_balance_says_which_way_the_loss_pushes():
    import numpy as np

    from agentgym.train.updaters.choice_ppo import advantage_balance

    # one success (+1.5 on 2 turns) among failures (-0.5 on 6 turns) and 2 turns without signal
    out = advantage_balance(np.array([1.5, 1.5, -0.5, -0.5, -0.5, -0.5, -0.5, -0.5, 0.0, 0.0]))
    assert out["choice/live_turn_share"] == pytest.approx(0.8)
    assert out["choice/positive_weight_share"] == pytest.approx(3.0 / 6.0)
    assert advantage_balance(np.zeros(3)) == {"choice/live_turn_share": 0.0, "choice/positive_weight_share": 0.0}


@pytest.mark.parametrize("agg,expected", [("token-mean", -1.0 / 3.0), ("seq-mean-token-mean", 0.0)])
def test_choice_loss_weighs_turns_or_trajectories(tiny, agg, expected, choice_components):
    """A 2-turn success (A=+1 each) beside a 1-turn failure (A=-1): a mean over turns pulls up (-1/3); a mean
    over trajectories of their turn-means balances them (0), whatever the trajectories' lengths."""
    import numpy as np

    from agentgym.train.config import load_config
    from agentgym.train.updaters.choice_ppo import choice_update, turn_weights

    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    cands = tuple(map(tuple, policy.candidate_ids(["left", "take key", "open door"])))
    p1 = chat.initial_prompt("Take the key.", "room 0 . key here .")
    p2 = chat.continue_prompt(p1, list(cands[1]), "room 0 . hold key .")
    won = ChoiceSequence(tuple(p2), (ChoiceTurn(0, len(p1), cands, 1, 0), ChoiceTurn(1, len(p2), cands, 2, 0)))
    lost = ChoiceSequence(tuple(p1), (ChoiceTurn(2, len(p1), cands, 0, 1),))
    assert [w.tolist() for w in turn_weights([won, lost], agg)] == \
        ([[1.0, 1.0], [1.0]] if agg == "token-mean" else [[0.5, 0.5], [1.0]])
    cfg = load_config("toy_learning", [f"algorithm.loss.agg={agg}", "train.ppo_epochs=1", "train.mini_batches=1",
                                        "algorithm.regularisers.entropy_coef=0"])
    model = copy.deepcopy(model).train()
    c = choice_components(cfg, model, tokenizer=tok, chat=chat)
    stats = choice_update(c, [won, lost], np.array([1.0, 1.0, -1.0]), cfg, shuffle_seed=0)
    assert stats.policy_loss / stats.turns == pytest.approx(expected, abs=1e-6)  # ratio 1: minus the weighted mean A


@pytest.mark.parametrize("optim,signal_follows", [(["optim.optimizer=adamw"], False),
                                                  (["optim.optimizer=sgd", "optim.lr=0.1"], True),
                                                  (["optim.optimizer=adamw", "optim.eps=100.0"], True)])
def test_how_far_a_first_step_moves_with_the_size_of_the_signal(tiny, optim, signal_follows, choice_components):
    """Advantages a hundredth the size: AdamW's first step is as long (it divides by the gradient's own size);
    SGD's, or AdamW's with an epsilon far above the per-weight gradients, is a hundredth as long."""
    import numpy as np

    from agentgym.train.config import load_config
    from agentgym.train.updaters.choice_ppo import choice_update

    base, tok = tiny
    policy = AdmissiblePolicy(base, tok)
    chat, seq = two_turn_sequence(policy)
    cfg = load_config("toy_learning", ["train.ppo_epochs=1", "train.mini_batches=1", "optim.max_grad_norm=1e9",
                                        "algorithm.regularisers.entropy_coef=0", *optim])
    moves = []
    for size in (1.0, 0.01):
        model = copy.deepcopy(base).train()
        c = choice_components(cfg, model, tokenizer=tok, chat=chat)
        before = [p.detach().clone() for p in model.parameters()]
        choice_update(c, [seq], np.array([1.0, -0.5]) * size, cfg, shuffle_seed=0)
        moves.append(sum(float((p.detach() - b).abs().sum()) for p, b in zip(model.parameters(), before)))
    assert moves[0] > 0
    if signal_follows:
        assert moves[1] / moves[0] == pytest.approx(0.01, rel=0.1)  # float32 rounding of tiny steps
    else:
        assert moves[1] / moves[0] > 0.9


def test_sgd_with_a_critic_is_refused():
    from agentgym.errors import ConfigError
    from agentgym.train.config import load_config

    with pytest.raises(ConfigError, match="optim.optimizer=sgd steps the policy only"):
        load_config("toy_learning", ["optim.optimizer=sgd", "algorithm.estimator=turn_gae", "model.critic=shared"])
    with pytest.raises(ConfigError, match="optim.betas and optim.eps are AdamW's"):
        load_config("toy_learning", ["optim.optimizer=sgd", "optim.eps=1e-3"])
