"""Acting among admissible actions: scores equal a plain forward pass, choices are always admissible,
and the chosen ids keep token-in-token-out."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.admissible import AdmissiblePolicy, choice_logprob, renormalised  # noqa: E402
from agentgym.policies.base import EnvContext, GenerationRequest, SamplingParams  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.train import tiny

    tiny.register_tiny_envs()
    path = tiny.build_tiny(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


def test_renormalised_maths():
    assert renormalised([0.0, 0.0], 1.0) == [0.5, 0.5]
    assert renormalised([1.0, 3.0, 3.0], 0.0) == [0.0, 1.0, 0.0]
    p = renormalised([math.log(1), math.log(3)], 1.0)
    assert p == pytest.approx([0.25, 0.75])
    assert choice_logprob([math.log(1), math.log(3)], 1) == pytest.approx(math.log(0.75))
    assert renormalised([-1e9, 0.0], 1.0) == pytest.approx([0.0, 1.0])  # no overflow


def test_candidate_scores_equal_a_full_forward(tiny):
    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    prompt = chat.initial_prompt("Take the key.", "You are in room 0 . key here .")
    actions = ["left", "take key", "open door", "right"]
    cands = policy.candidate_ids(actions)
    got = policy.candidate_scores(prompt, cands)
    for c, lps in zip(cands, got):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + c])).logits[0]
        ref = torch.log_softmax(logits.float(), -1)
        want = [float(ref[len(prompt) - 1 + j, c[j]]) for j in range(len(c))]
        assert lps == pytest.approx(want, abs=1e-4)


def _reference(model, prompt, cands):
    out = []
    for c in cands:
        with torch.no_grad():
            ref = torch.log_softmax(model(input_ids=torch.tensor([prompt + c])).logits[0].float(), -1)
        out.append([float(ref[len(prompt) - 1 + j, c[j]]) for j in range(len(c))])
    return out


def test_next_turn_reuses_the_stored_prompt_and_scores_the_same(tiny):
    """Turn 2's prompt extends turn 1's: its cached KV is reused (only the new tokens run) and the scores
    still equal separate full forward passes, for candidates of different lengths."""
    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    first = chat.initial_prompt("Take the key.", "You are in room 0 .")
    cands = policy.candidate_ids(["left", "take key", "open the big door now", "r", "go to cabinet 1", "go to cabinet 2",
                                  "go to drawer 1"])  # shared prefixes: one tree branch
    policy.candidate_scores(first, cands)
    store = policy.free.prefix_store
    assert len(store) == 1 and store.miss_tokens == len(first)
    second = first + cands[1] + chat.encode(" key taken . room 0 .")
    got = policy.candidate_scores(second, cands)
    assert store.hit_tokens == len(first)  # only the new tokens ran
    for lps, want in zip(got, _reference(model, second, cands)):
        assert lps == pytest.approx(want, abs=1e-4)
    # weights trained in place: the stored KV is stale and must not be used
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    got = policy.candidate_scores(second, cands)
    for lps, want in zip(got, _reference(model, second, cands)):
        assert lps == pytest.approx(want, abs=1e-4)
    with torch.no_grad():
        next(model.parameters()).sub_(0.01)


def test_choices_are_admissible_and_token_exact(tiny):
    model, tok = tiny
    policy = AdmissiblePolicy(model, tok)
    chat = policy.chat_format()
    prompt = tuple(chat.initial_prompt("Take the key.", "room 0"))
    actions = ["left", "take key", "open door", "right"]
    ctx = EnvContext(None, "room 0", {"admissible_actions": actions})
    seen = set()
    for seed in range(24):
        gen = policy.generate([GenerationRequest(prompt, SamplingParams(temperature=1.0, seed=seed), ctx)])[0]
        assert gen.text in actions and gen.finish_reason == "stop"
        assert list(gen.token_ids) == policy.candidate_ids([gen.text])[0] and gen.token_ids[-1] == chat.end_of_turn_id
        seen.add(gen.text)
    assert len(seen) >= 2  # it samples, not always the same
    scores = [sum(s) for s in policy.candidate_scores(list(prompt), policy.candidate_ids(actions))]
    greedy = policy.generate([GenerationRequest(prompt, SamplingParams(temperature=0.0), ctx)])[0]
    assert greedy.text == actions[scores.index(max(scores))]
    # no admissible list: free generation
    free = policy.generate([GenerationRequest(prompt, SamplingParams(temperature=0.0, max_tokens=2), None)])[0]
    assert free.finish_reason in ("stop", "length") and len(free.token_ids) <= 2


def test_rollout_with_admissible_actions_is_always_valid(tiny):
    from agentgym.engine.rollout import RolloutConfig, rollout
    from agentgym.train.tiny import ONE_WORD_ENV

    model, tok = tiny
    config = RolloutConfig(max_turns=4, layout="trajectory", sampling=SamplingParams(temperature=1.0, max_tokens=3))
    trajs = rollout(ONE_WORD_ENV, AdmissiblePolicy(model, tok), None, [0, 1, 2], 2, config, env_kwargs={"length": 2})
    answers = [obs for t in trajs for obs in [*(k.observation for k in t.turns[1:]), t.final_observation]]
    assert len(answers) >= 6
    # every choice was a listed command (the toy env lists "open door" even while it is locked)
    assert not [a for a in answers if a.startswith(("Unknown command", "You cannot"))]
    chat = AdmissiblePolicy(model, tok).chat_format()
    for t in trajs:
        chat.verify_trajectory(t)


def test_policy_spec(tiny, tmp_path):
    from agentgym.errors import ConfigError
    from agentgym.policies import load_policy

    model, tok = tiny
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    assert isinstance(load_policy(f"admissible:checkpoint:{tmp_path}/m", device="cpu"), AdmissiblePolicy)
    with pytest.raises(ConfigError, match="admissible:hf:MODEL"):
        load_policy("admissible:oracle")
    with pytest.raises(ConfigError, match="missing its argument"):
        load_policy("admissible:")
