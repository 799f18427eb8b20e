"""Gradient checkpointing really runs in the trainer's forward, and changes nothing but memory."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentgym.train.updaters.token_ppo import _action_logits  # noqa: E402


def _tiny_llama():
    cfg = transformers.LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def _run(model, checkpointing: bool):
    model = copy.deepcopy(model)
    calls = []
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for layer in model.model.layers:
            inner = layer._gradient_checkpointing_func
            layer._gradient_checkpointing_func = lambda *a, _f=inner, **k: calls.append(1) or _f(*a, **k)
    model.eval()  # as the trainer keeps it
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 11, dtype=torch.bool)
    logits, _ = _action_logits(model, ids, torch.ones_like(ids), mask)
    torch.log_softmax(logits, -1)[:, 3].sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    flags = [layer.training for layer in model.model.layers]
    return logits.detach(), grads, len(calls), flags


def test_checkpointing_runs_in_eval_mode_and_gives_the_same_gradients():
    model = _tiny_llama()
    plain_logits, plain_grads, _, _ = _run(model, checkpointing=False)
    logits, grads, calls, flags = _run(model, checkpointing=True)
    assert calls == 2                      # both layers went through torch's checkpoint
    assert flags == [False, False]         # and were put back in eval mode afterwards
    torch.testing.assert_close(logits, plain_logits)
    for got, want in zip(grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_no_checkpointing_without_a_graph():
    model = _tiny_llama()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.eval()
    with torch.no_grad():
        _action_logits(model, torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 5, dtype=torch.long),
                       torch.ones(1, 4, dtype=torch.bool))
    assert not any(layer.training for layer in model.model.layers)
