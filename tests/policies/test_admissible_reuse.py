"""A turn the admissible policy scored before with the same weights (the same prompt and candidates: a group's
plays of one task until their picks part) is answered from its memo without running the model; a weight
change since (an optimizer step, in place) clears it, and `reuse_scores = False` always runs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.policies.admissible import AdmissiblePolicy  # noqa: E402


@pytest.fixture()
def policy(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.train import tiny

    path = tiny.build_tiny(tmp_path / "tiny")
    return AdmissiblePolicy(AutoModelForCausalLM.from_pretrained(str(path)).eval(),
                            AutoTokenizer.from_pretrained(str(path)))


def test_a_turn_scored_before_with_these_weights_is_not_run_again(policy):
    chat = policy.chat_format()
    prompt = list(chat.initial_prompt("Take the key.", "room 0 . key here ."))
    cands = policy.candidate_ids(["left", "take key", "open door"])
    first = policy.candidate_scores(prompt, cands)
    policy.scoring_stats()
    again = policy.candidate_scores(prompt, cands)
    stats = policy.scoring_stats()
    assert again == first and stats["turns"] == 1 and stats["turns_reused"] == 1
    assert stats["prompt_tokens_run"] == 0 and stats["candidate_tokens"] == 0
    again[0][0] = 0.0                                     # the caller's copy, not the memo
    assert policy.candidate_scores(prompt, cands) == first
    policy.scoring_stats()
    policy.candidate_scores(prompt, cands[:2])            # other candidates: run
    assert policy.scoring_stats()["turns_reused"] == 0
    with torch.no_grad():
        next(policy.model.parameters()).add_(0.01)        # trained in place since: stale, run again
    changed = policy.candidate_scores(prompt, cands)
    assert policy.scoring_stats()["turns_reused"] == 0
    cold = AdmissiblePolicy(policy.model, policy.tokenizer)   # nothing stored: the new weights' own scores
    for lps, want in zip(changed, cold.candidate_scores(prompt, cands)):
        assert lps == pytest.approx(want, abs=1e-5)
    assert changed != first
    policy.reuse_scores = False
    policy.candidate_scores(prompt, cands)
    assert policy.scoring_stats()["turns_reused"] == 0
