"""The hf policy's speed-ups change no output: growing KV cache, prefix reuse across turns, shared group prompts.

Each case runs the same requests through the shared SmolLM2 model with a speed-up on and with the
plain path (transformers' own DynamicCache, no prefix store), and compares tokens and logprobs.
"""
from __future__ import annotations

import pytest

from agentgym.policies.base import GenerationRequest, SamplingParams

pytestmark = [pytest.mark.model]


def _req(prompt, **sampling):
    return GenerationRequest(tuple(prompt), SamplingParams(**sampling))


def _variant(smol, **kwargs):
    from agentgym.policies.hf import HFPolicy

    return HFPolicy(smol.model, smol.tokenizer, **kwargs)


@pytest.fixture
def plain(smol):
    return _variant(smol, prefix_cache_mb=0, growing_cache=False)


def _same(a, b, tol=1e-3):
    assert a.token_ids == b.token_ids and a.text == b.text and a.finish_reason == b.finish_reason
    assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < tol


def _next_turn(smol, prompt, gen, observation):
    """What the trajectory layout sends next: prompt + generated ids + the observation's chat turn."""
    after = smol.tokenizer.apply_chat_template([{"role": "user", "content": observation}],
                                               add_generation_prompt=True, return_dict=False)
    return tuple(prompt) + tuple(gen.token_ids) + tuple(after)


@pytest.mark.parametrize("growing, prefix_mb", [(True, 0), (False, 64), (True, 64)])
def test_three_turn_episodes_match_the_plain_path(smol, smol_prompts, plain, growing, prefix_mb):
    fast = _variant(smol, prefix_cache_mb=prefix_mb, growing_cache=growing)
    prompts = [smol_prompts[0], smol_prompts[2]]
    for turn in range(3):
        requests = [_req(p, temperature=0.8, max_tokens=6, seed=10 * turn + i) for i, p in enumerate(prompts)]
        fast_gens, plain_gens = fast.generate(requests), plain.generate(requests)
        for f, p in zip(fast_gens, plain_gens):
            _same(f, p)
        prompts = [_next_turn(smol, r.prompt_ids, g, f"You see {turn} keys.") for r, g in zip(requests, fast_gens)]
    if prefix_mb:
        store = fast.prefix_store
        assert store.hit_tokens > store.miss_tokens  # turns 2 and 3 ran only their new tokens
        assert len(store) == 2  # one entry per episode: each turn's entry replaced the one it extends


def test_reused_prefix_logprobs_match_teacher_forced(smol, smol_prompts):
    import torch

    fast = _variant(smol, prefix_cache_mb=64)
    first = fast.generate([_req(smol_prompts[1], temperature=0, max_tokens=5)])[0]
    prompt = _next_turn(smol, smol_prompts[1], first, "And of Spain?")
    gen = fast.generate([_req(prompt, temperature=0.7, max_tokens=8, seed=3)])[0]
    assert fast.prefix_store.hit_tokens >= len(smol_prompts[1])
    ids = torch.tensor([list(prompt) + list(gen.token_ids)])
    with torch.no_grad():
        logits = smol.model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1)
    assert max(abs(a - b) for a, b in zip(gen.logprobs, expected.tolist())) < 2e-3


def test_group_of_one_prompt_runs_the_prompt_once(smol, smol_prompts, plain):
    fast = _variant(smol, prefix_cache_mb=64)
    requests = [_req(smol_prompts[2], temperature=1.0, max_tokens=5, seed=s) for s in range(4)]
    fast_gens = fast.generate(requests)
    for f, p in zip(fast_gens, plain.generate(requests)):
        _same(f, p)
    n = len(smol_prompts[2])
    assert fast.prefix_store.miss_tokens == n + 4  # the shared prompt once, then one token per sample
    assert fast.prefix_store.hit_tokens == 4 * (n - 1)


def test_training_in_place_clears_the_stored_prefixes(smol, smol_prompts):
    import torch

    fast = _variant(smol, prefix_cache_mb=64)
    fast.generate([_req(smol_prompts[2], temperature=0, max_tokens=3)])
    assert len(fast.prefix_store) == 1
    weight = smol.model.get_output_embeddings().weight
    with torch.no_grad():
        weight.mul_(1.0)  # an optimizer step writes in place like this: the stored KV may be stale now
    hits = fast.prefix_store.hit_tokens
    fast.generate([_req(smol_prompts[2], temperature=0, max_tokens=3)])
    assert fast.prefix_store.hit_tokens == hits  # nothing reused across the weight change
    fast.update_weights({"model.norm.weight": smol.model.state_dict()["model.norm.weight"].clone()})
    assert len(fast.prefix_store) == 0


def test_store_keeps_to_its_budget(smol, smol_prompts):
    fast = _variant(smol, prefix_cache_mb=0.05)  # ~50 KB: about one token of SmolLM2's fp32 KV
    fast.generate([_req(p, temperature=0, max_tokens=3) for p in smol_prompts])
    assert fast.prefix_store.bytes <= 0.05 * 2**20
