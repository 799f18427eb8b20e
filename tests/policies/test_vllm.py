"""VLLMPolicy: request/response conversion and engine calls against objects shaped like vLLM's.

The real engine tests at the bottom run only where vLLM and a CUDA GPU exist.
"""
from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass, field

import pytest

from agentgym.errors import PolicyError
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.policies.vllm import (VLLMPolicy, from_vllm_output, load_weights_into, sampled_logprobs,
                                    to_vllm_prompt, to_vllm_sampling)


@dataclass
class Logprob:  # vllm.sequence.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:  # vllm.outputs.CompletionOutput
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:  # vllm.outputs.RequestOutput
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class FakeLLM:
    """Records calls; answers each prompt with its ids reversed (so tests can see per-request routing)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.model = types.SimpleNamespace(loaded=[], load_weights=lambda weights: self.model.loaded.append(weights))

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append(("generate", prompts, sampling_params))
        outs = []
        for i, (prompt, params) in enumerate(zip(prompts, sampling_params)):
            ids = list(reversed(prompt["prompt_token_ids"]))[: params.kwargs["max_tokens"]]
            logprobs = [{t: Logprob(-0.25 * (k + 1)), t + 1: Logprob(-9.0)} for k, t in enumerate(ids)]
            outs.append(RequestOutput(str(i), prompt["prompt_token_ids"],
                                      [CompletionOutput(0, "x" * len(ids), ids, None, logprobs, "length")]))
        return outs

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))

    def apply_model(self, fn):
        self.calls.append(("apply_model",))
        return [fn(self.model)]

    def get_tokenizer(self):
        return "tok"


@pytest.fixture
def fake_vllm(monkeypatch):
    """A `vllm` module with SamplingParams, inputs.TokensPrompt and LLM, shaped like the real one."""
    module = types.ModuleType("vllm")

    class SamplingParamsStub:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    module.SamplingParams = SamplingParamsStub
    module.inputs = types.SimpleNamespace(TokensPrompt=lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids})
    module.LLM = lambda **kwargs: (_ for _ in ()).throw(RuntimeError("CUDA not available"))
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_sampling_conversion(fake_vllm):
    params = to_vllm_sampling(fake_vllm, SamplingParams(temperature=0.5, top_p=0.9, max_tokens=7,
                                                        stop=("</a>",), seed=3))
    assert params.kwargs == {"n": 1, "temperature": 0.5, "top_p": 0.9, "max_tokens": 7, "stop": ["</a>"],
                             "seed": 3, "logprobs": 0, "include_stop_str_in_output": True,
                             "skip_special_tokens": False}
    assert to_vllm_sampling(fake_vllm, SamplingParams()).kwargs["stop"] is None
    assert to_vllm_prompt(fake_vllm, GenerationRequest((5, 6))) == {"prompt_token_ids": [5, 6]}


def test_output_conversion():
    ids = [4, 8]
    out = RequestOutput("0", [1], [CompletionOutput(0, "ab", ids, -1.0,
                                                    [{4: Logprob(-0.5)}, {8: Logprob(-1.5), 9: Logprob(-2.0)}],
                                                    "stop", "</a>")])
    gen = from_vllm_output(out)
    assert gen.token_ids == (4, 8) and gen.text == "ab" and gen.logprobs == (-0.5, -1.5)
    assert gen.finish_reason == "stop" and gen.error is None
    aborted = from_vllm_output(RequestOutput("1", [1], [CompletionOutput(0, "", [], None, None, "abort")]))
    assert aborted.finish_reason == "error" and "abort" in aborted.error
    assert from_vllm_output(RequestOutput("2", [1], [])).finish_reason == "error"


def test_missing_logprobs_are_nan():
    assert all(math.isnan(x) for x in sampled_logprobs([1, 2], None))
    values = sampled_logprobs([1, 2], [{1: Logprob(-0.1)}])
    assert values[0] == -0.1 and math.isnan(values[1])


def test_generate_routes_requests_and_errors(fake_vllm):
    llm = FakeLLM()
    policy = VLLMPolicy("m", llm=llm)
    gens = policy.generate([GenerationRequest((1, 2, 3), SamplingParams(max_tokens=2)),
                            GenerationRequest((), SamplingParams()),
                            GenerationRequest((7,), SamplingParams(max_tokens=5))])
    assert gens[0].token_ids == (3, 2) and gens[0].logprobs == (-0.25, -0.5)
    assert gens[1].finish_reason == "error" and "empty prompt" in gens[1].error
    assert gens[2].token_ids == (7,)
    (_, prompts, params), = [c for c in llm.calls if c[0] == "generate"]
    assert [p["prompt_token_ids"] for p in prompts] == [[1, 2, 3], [7]] and len(params) == 2
    assert policy.tokenizer == "tok"


def test_sleep_wake_and_weight_push(fake_vllm):
    llm = FakeLLM()
    policy = VLLMPolicy("m", llm=llm)
    policy.sleep(level=1)
    policy.update_weights({"w": 1, "b": 2})
    assert [c[0] for c in llm.calls] == ["sleep", "wake_up", "apply_model", "reset_prefix_cache", "wake_up"]
    assert llm.calls[1] == ("wake_up", ["weights"]) and llm.calls[4] == ("wake_up", ["kv_cache"])
    assert llm.model.loaded == [[("w", 1), ("b", 2)]] and not policy.sleeping
    policy.sleep()
    policy.generate([GenerationRequest((1,), SamplingParams(max_tokens=1))])  # wakes itself up
    assert ("wake_up", None) in llm.calls and not policy.sleeping


def test_weight_push_through_driver_worker():
    loaded = []
    model = types.SimpleNamespace(load_weights=lambda weights: loaded.append(weights))
    worker = types.SimpleNamespace(worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model=model)))
    llm = types.SimpleNamespace(llm_engine=types.SimpleNamespace(model_executor=types.SimpleNamespace(
        driver_worker=worker)))
    load_weights_into(llm, [("a", 1)])
    assert loaded == [[("a", 1)]]
    with pytest.raises(PolicyError, match="cannot reach"):
        load_weights_into(types.SimpleNamespace(), [("a", 1)])


def test_engine_start_failure_is_a_policy_error(fake_vllm):
    with pytest.raises(PolicyError, match="could not start 'some/model'"):
        VLLMPolicy("some/model")


def test_missing_vllm_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"agentgym\[vllm\]"):
        VLLMPolicy("m")


def _real_vllm():
    vllm = pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return vllm


@pytest.mark.vllm
@pytest.mark.gpu
def test_real_engine_generates_token_ids_with_logprobs():
    _real_vllm()
    from agentgym.policies.models import DEFAULT_MODEL, resolve_model

    source = resolve_model(DEFAULT_MODEL)
    policy = VLLMPolicy(f"{source.path}/{source.gguf_file}", tokenizer=None, gpu_memory_utilization=0.3,
                        enforce_eager=True)
    prompt = policy.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    gens = policy.generate([GenerationRequest(tuple(prompt), SamplingParams(temperature=0, max_tokens=8)),
                            GenerationRequest(tuple(prompt), SamplingParams(temperature=1.0, max_tokens=8, seed=1))])
    for gen in gens:
        assert gen.finish_reason in ("stop", "length") and len(gen.logprobs) == len(gen.token_ids) > 0
        assert all(lp <= 0 for lp in gen.logprobs)
    policy.sleep()
    policy.wake_up()
    assert policy.generate([GenerationRequest(tuple(prompt), SamplingParams(temperature=0, max_tokens=8))])[0] \
        .token_ids == gens[0].token_ids
