"""Several episodes' turns scored in one pass (AdmissiblePolicy.candidate_scores_many, TurnsMask): the same
scores, stored prompt KV and kept trunk as scoring each turn alone, whatever each turn's cached prefix; a turn
asked twice runs once; the pass is cut at max_pass_tokens; generate() plays the same with and without it."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.admissible import AdmissiblePolicy  # noqa: E402
from agentgym.policies.base import EnvContext, GenerationRequest, SamplingParams  # noqa: E402
from agentgym.train.setup import freeze_below_top_layers  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.train import tiny

    path = tiny.build_tiny(tmp_path_factory.mktemp("tiny"), layers=4, hidden=64)
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    freeze_below_top_layers(model, 2)
    return model, AutoTokenizer.from_pretrained(str(path))


def _policy(tiny, keep_trunk: bool = False, batch: bool = True) -> AdmissiblePolicy:
    policy = AdmissiblePolicy(*tiny)
    policy.keep_trunk = keep_trunk
    policy.batch_turns = batch
    return policy


def _episodes(policy: AdmissiblePolicy) -> list[list[tuple[list[int], list[list[int]]]]]:
    """Three episodes of two turns (the second turn's prompt extends the first's), different candidates."""
    chat = policy.chat_format()
    lists = [["left", "take key", "open the big door now"], ["go to cabinet 1", "go to cabinet 2", "go to drawer 1", "r"],
             ["take key", "look"]]
    out = []
    for i, actions in enumerate(lists):
        cands = policy.candidate_ids(actions)
        # the episodes' first prompts share the task's wording (more than WAIT_TOKENS), then differ
        first = chat.initial_prompt("Take the key." + " The house is big and the key is small ." * 3,
                                    f"You are in room {i} ." + " a long corridor ." * i)
        second = first + cands[0] + chat.encode(f" nothing happens in room {i} .")
        out.append([(first, cands), (second, cands[1:])])
    return out


def test_turns_scored_together_equal_each_scored_alone(tiny):
    together, alone = _policy(tiny, keep_trunk=True), _policy(tiny, keep_trunk=True)
    episodes = _episodes(together)
    for turn in range(2):
        asked = [ep[turn] for ep in episodes]
        got = together.candidate_scores_many(asked)
        want = [alone.candidate_scores(prompt, cands) for prompt, cands in asked]
        for g, w in zip(got, want):
            for lps, ref in zip(g, w):
                assert lps == pytest.approx(ref, abs=2e-5)
    a, b = together.scoring_stats(), alone.scoring_stats()
    assert a["prompt_tokens_reused"] == b["prompt_tokens_reused"] > 0      # turn 2 read turn 1's stored KV
    assert a["prompt_tokens_run"] == b["prompt_tokens_run"] and a["candidate_tokens"] == b["candidate_tokens"]
    # the prompts' stored KV and the kept trunk (what the update's row is built from) equal the one-by-one path's
    for (prompt, _), _ in [(ep[1], None) for ep in episodes]:
        (n1, e1), (n2, e2) = together.free.prefix_store.longest(prompt), alone.free.prefix_store.longest(prompt)
        assert n1 == n2 == len(prompt)
        for k1, k2 in zip(e1.keys + e1.values, e2.keys + e2.values):
            assert torch.allclose(k1, k2, atol=2e-5, rtol=0)
    model = tiny[0]
    for ep in episodes:
        (p1, c1), (p2, c2) = ep
        row = [(len(p1), c1), (len(p2), c2)]
        kept, ref = together.rollout_trunk(model, p2, row), alone.rollout_trunk(model, p2, row)
        assert kept is not None and ref is not None
        assert torch.allclose(kept.hidden, ref.hidden, atol=2e-5, rtol=0)


def test_a_turn_asked_twice_runs_once_and_a_small_pass_budget_cuts_the_pass(tiny):
    policy = _policy(tiny)
    (turn, _), (other, _), _ = _episodes(policy)
    twice = policy.candidate_scores_many([turn, other, turn])
    assert twice[0] == twice[2]
    stats = policy.scoring_stats()
    assert stats["turns"] == 3 and stats["turns_reused"] == 1
    single = _policy(tiny)
    single.candidate_scores(*turn)
    single.candidate_scores(*other)
    assert single.scoring_stats()["candidate_tokens"] == stats["candidate_tokens"]
    cut = _policy(tiny)
    cut.max_pass_tokens = 1                                  # every turn in a pass of its own
    assert cut._chunks([turn, other], [0, 1]) == [[0], [1]]
    for g, w in zip(cut.candidate_scores_many([turn, other]), twice[:2]):
        for lps, ref in zip(g, w):
            assert lps == pytest.approx(ref, abs=2e-5)
    assert _policy(tiny)._chunks([turn, other], [0, 1]) == [[0, 1]]


def test_generate_plays_the_same_with_and_without_one_pass_for_all(tiny):
    policies = [_policy(tiny, batch=True), _policy(tiny, batch=False)]
    chat = policies[0].chat_format()
    requests = []
    for i, actions in enumerate([["left", "take key"], ["open door", "look", "right"], ["take key", "left"]]):
        prompt = tuple(chat.initial_prompt("Take the key.", f"room {i}"))
        requests.append(GenerationRequest(prompt, SamplingParams(temperature=1.0, seed=i),
                                          EnvContext(None, f"room {i}", {"admissible_actions": actions})))
    played = [p.generate(requests) for p in policies]
    for a, b in zip(*played):
        assert a.text == b.text and a.choice.pick == b.choice.pick
        assert a.choice.scores == pytest.approx(b.choice.scores, abs=1e-4)
