"""The hf policy passes and reads the KV cache under the name the installed transformers uses: `past_key_values`
up to 5.19, `cache` after (where the old name warns on every call, into the user's console)."""
import dataclasses

import pytest

pytest.importorskip("torch")
kv_cache = pytest.importorskip("agentgym.policies.kv_cache")


class OldModel:
    def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
        pass


class NewModel:
    def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):
        pass


class Wrapper:  # a PEFT model: forward(*args, **kwargs) in front of the real one
    def __init__(self, inner):
        self.inner = inner

    def forward(self, *args, **kwargs):
        pass

    def get_base_model(self):
        return self.inner


def test_the_argument_name_follows_the_models_signature():
    assert kv_cache.cache_kwarg(OldModel(), "kv") == {"past_key_values": "kv"}
    assert kv_cache.cache_kwarg(NewModel(), "kv") == {"cache": "kv"}
    assert kv_cache.cache_kwarg(Wrapper(NewModel()), "kv") == {"cache": "kv"}
    assert kv_cache.cache_kwarg(Wrapper(OldModel()), None) == {"past_key_values": None}


def test_the_output_field_follows_the_output_class():
    @dataclasses.dataclass
    class Old:
        past_key_values: object = None

    @dataclasses.dataclass
    class New:
        cache: object = None

        @property
        def past_key_values(self):
            raise AssertionError("the deprecated alias was read")

    assert kv_cache.output_cache(Old(past_key_values="kv")) == "kv"
    assert kv_cache.output_cache(New(cache="kv")) == "kv"


@pytest.mark.slow   # imports transformers' Llama (several seconds on a busy machine)
def test_the_installed_llama_takes_the_chosen_name():
    import inspect

    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    (name,) = kv_cache.cache_kwarg(model, None)
    assert name in inspect.signature(type(model).forward).parameters
    assert name in inspect.signature(type(model.model).forward).parameters
