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


def test_a_plugin_back_end_registers_through_the_entry_point_group(tmp_path, monkeypatch):
    """A distribution on sys.path declares an `agentgym.policies` entry point, as an installed plug-in would;
    `load_policy` finds it the first time it meets the kind, builds the back end and the policy generates."""
    import importlib
    import sys

    from agentgym.policies import registry

    package = tmp_path / "echo_backend"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from agentgym.policies import register_backend\n"
        "from agentgym.policies.base import BasePolicy, Generation\n\n"
        "class EchoPolicy(BasePolicy):\n"
        "    def __init__(self, word, repeat=1):\n"
        "        self.word, self.repeat = word, repeat\n\n"
        "    def generate(self, requests):\n"
        "        return [Generation((), ' '.join([self.word] * self.repeat), (), 'stop') for _ in requests]\n\n"
        "def register():\n"
        "    register_backend('echo', lambda arg, **kw: EchoPolicy(arg, **kw), needs_arg='echo:WORD')\n")
    dist = tmp_path / "echo_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[agentgym.policies]\necho = echo_backend:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))
    monkeypatch.setattr(registry, "_NEEDS_ARG", dict(registry._NEEDS_ARG))
    try:
        policy = load_policy("echo:hello", repeat=2)
        request = GenerationRequest((1,), SamplingParams(), EnvContext(None, "obs", {}))
        assert type(policy).__name__ == "EchoPolicy" and policy.generate([request])[0].text == "hello hello"
        with pytest.raises(ConfigError, match="echo:WORD"):
            load_policy("echo")
        # the core's by-name seam reaches the same registry (no import of the wing in agentgym/)
        from agentgym.policy import load_policy as core_load_policy

        assert core_load_policy("echo:hi").generate([request])[0].text == "hi"
    finally:
        sys.modules.pop("echo_backend", None)


def test_a_back_end_cannot_take_a_built_in_name():
    from agentgym.policies import register_backend

    with pytest.raises(ValueError, match="built-in"):
        register_backend("hf", lambda arg: None)


def test_one_checkpoint_resolver_for_load_policy_and_the_trainer(tmp_path):
    from agentgym.policies.registry import checkpoint_model_dir

    step = tmp_path / "ckpt-3" / "model"
    step.mkdir(parents=True)
    (step / "config.json").write_text("{}")
    (tmp_path / "latest").write_text("ckpt-3\n")
    assert checkpoint_model_dir(str(tmp_path)) == str(step) == checkpoint_model_dir(str(tmp_path / "ckpt-3"))
    pytest.importorskip("torch")
    from agentgym.train.config import config_from_dict
    from agentgym.train.setup import model_path

    config = config_from_dict({"model": {"policy": f"checkpoint:{tmp_path}"}})
    assert model_path(config, tmp_path) == str(step)
    with pytest.raises(ConfigError, match="model/config.json"):  # the trainer's error is load_policy's
        model_path(config_from_dict({"model": {"policy": f"checkpoint:{tmp_path / 'nothing'}"}}), tmp_path)
