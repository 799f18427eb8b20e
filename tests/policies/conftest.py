"""Fixtures for the policy backends: the real SmolLM2 model, loaded once per session.

Torch runs single-threaded inside these tests: on a small shared CI box, OpenMP threads spinning against
other processes make one 135M-parameter decode step many times slower than one thread does.
"""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smol():
    """HFPolicy with the embedded SmolLM2-135M-Instruct (fp32, CPU), shared by every test of the session."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    import torch

    from agentgym.policies.hf import HFPolicy
    from agentgym.policies.models import embedded_gguf_path
    from agentgym.errors import PolicyError

    try:
        embedded_gguf_path("smollm2-135m-instruct")
    except PolicyError as exc:
        pytest.skip(str(exc))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return HFPolicy.from_pretrained("smollm2-135m-instruct", device="cpu")
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smol_prompts(smol):
    """Three chat prompts of different lengths, as token ids from the model's own template."""
    questions = ["Hi", "What is the capital of France? Answer in one word.",
                 "Write one sentence about a cat who opens a locked door with a small brass key."]
    return [tuple(smol.tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                                     add_generation_prompt=True, return_dict=False))
            for q in questions]
