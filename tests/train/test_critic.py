"""The separate critic reads the decoder's last hidden state without building the LM head's logits."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_separate_critic_values_equal_those_from_the_full_causal_lm_forward(tmp_path):
    from transformers import AutoModelForCausalLM

    from agentgym.train.critic import build_critic
    from agentgym.train.tiny import build_tiny

    model = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "tiny"))
    critic = build_critic("separate", model).eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding
    calls = []
    hook = critic.backbone.lm_head.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        values = critic(ids, mask)
        full = critic.backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
    hook.remove()
    assert values.shape == (2, 7)
    assert calls == [1]  # only the reference forward above ran the LM head
    assert torch.allclose(values, critic.head(full), atol=1e-6)
