"""`load_policy(spec)`: every spec kind, and one-line errors for bad specs."""
from __future__ import annotations

import pytest

from agentgym.errors import ConfigError
from agentgym.policies import load_policy
from agentgym.policies.base import EnvContext, GenerationRequest, SamplingParams


@pytest.mark.parametrize("spec, message", [
    ("", "non-empty"),
    ("hff:smollm2", "did you mean 'hf'"),
    ("openai", r"openai:URL\[#MODEL\]"),
    ("checkpoint:", "checkpoint:DIR"),
    ("scripted:nofunc", "FILE_OR_MODULE:FUNC"),
    ("scripted:no_such_module_xyz:f", "cannot import"),
    ("scripted:os.path:no_such_function", "no function"),
    ("random:abc", r"random\[:SEED\]"),
])
def test_bad_specs_say_how_to_fix(spec, message):
    with pytest.raises(ConfigError, match=message):
        load_policy(spec)


def test_checkpoint_without_model_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="model/config.json"):
        load_policy(f"checkpoint:{tmp_path}")


def test_random_oracle_and_scripted(tmp_path):
    from agentgym.policies.scripted import OraclePolicy, RandomPolicy, ScriptedPolicy

    assert isinstance(load_policy("random"), RandomPolicy) and isinstance(load_policy("random:3"), RandomPolicy)
    assert isinstance(load_policy("oracle"), OraclePolicy)
    script = tmp_path / "my_agent.py"
    script.write_text("def act(ctx):\n    return 'go ' + ctx.observation\n")
    policy = load_policy(f"scripted:{script}:act")
    assert isinstance(policy, ScriptedPolicy)
    request = GenerationRequest((1,), SamplingParams(), EnvContext(None, "north", {}))
    assert policy.generate([request])[0].text == "go north"
    assert isinstance(load_policy("scripted:os.path:basename"), ScriptedPolicy)


def test_openai_spec_splits_url_and_model():
    from agentgym.policies.openai import OpenAIPolicy

    policy = load_policy("openai:http://127.0.0.1:8000/v1#my-model", max_retries=1)
    assert isinstance(policy, OpenAIPolicy)
    assert policy.base_url == "http://127.0.0.1:8000/v1" and policy.model == "my-model" and policy.max_retries == 1
    assert load_policy("openai:http://127.0.0.1:8000").model is None


def test_vllm_spec_without_vllm_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"agentgym\[vllm\]"):
        load_policy("vllm:some/model")


@pytest.mark.model
def test_checkpoint_and_local_dir_specs_load_hf_policies(tmp_path, smol):
    """A training checkpoint (DIR/latest -> step/model) loads as an HFPolicy that generates."""
    transformers = pytest.importorskip("transformers")
    from agentgym.policies.hf import HFPolicy

    config = transformers.LlamaConfig(vocab_size=len(smol.tokenizer), hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                      max_position_embeddings=512, eos_token_id=smol.tokenizer.eos_token_id)
    step = tmp_path / "run" / "step-3"
    transformers.LlamaForCausalLM(config).save_pretrained(step / "model")
    smol.tokenizer.save_pretrained(step / "model")
    (tmp_path / "run" / "latest").write_text("step-3\n")
    for spec in (f"checkpoint:{tmp_path / 'run'}", f"checkpoint:{step}", f"hf:{step / 'model'}"):
        policy = load_policy(spec, device="cpu")
        assert isinstance(policy, HFPolicy)
        gen, = policy.generate([GenerationRequest((1, 2, 3), SamplingParams(temperature=0, max_tokens=3))])
        assert gen.finish_reason in ("stop", "length") and 0 < len(gen.token_ids) <= 3
