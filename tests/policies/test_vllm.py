"""VLLMPolicy: request/response conversion and engine calls against objects shaped like vLLM's.

The real engine tests at the bottom run only where vLLM and a CUDA GPU exist.
"""
from __future__ import annotations

import inspect
import math
import sys
import types
from dataclasses import dataclass

import pytest

from agentgym.errors import PolicyError
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.policies.vllm import (RECEIVE_METHOD, WORKER_EXTENSION, VLLMPolicy, WeightSyncWorker, buckets,
                                    from_vllm_output, push_weights, sampled_logprobs, to_vllm_prompt,
                                    to_vllm_sampling)


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


class FakeModel:
    """Stands in for a vLLM model: `load_weights(weights=...)` copies named tensors into its parameters."""

    def __init__(self) -> None:
        torch = pytest.importorskip("torch")
        self.params = {"embed.weight": torch.zeros(4, 3), "head.weight": torch.zeros(2, 3, dtype=torch.bfloat16)}
        self.calls = 0

    def load_weights(self, weights):
        self.calls += 1
        for name, tensor in weights:
            self.params[name].copy_(tensor)


class FakeWorker(WeightSyncWorker):
    """A vLLM GPU worker as the extension sees it: `device` and `model_runner.model`."""

    def __init__(self) -> None:
        import torch

        self.device = torch.device("cpu")
        self.model_runner = types.SimpleNamespace(model=FakeModel())


def _worker_process(address, results):
    worker = FakeWorker()
    loaded = worker.agentgym_receive_weights(address)
    results.put((loaded, worker.model_runner.model.calls,
                 {k: v.float().tolist() for k, v in worker.model_runner.model.params.items()}))


class FakeLLM:
    """`vllm.LLM` with the real signatures (vLLM 0.33; `test_fake_matches_the_installed_vllm` compares them).
    Records calls; answers each prompt with its ids reversed. `collective_rpc` runs the named worker method
    on a worker in this process, or (`worker="process"`) in a spawned process, as vLLM V1's engine core does."""

    def __init__(self, worker: str = "inproc") -> None:
        self.calls: list[tuple] = []
        self.worker = FakeWorker() if worker == "inproc" else None
        self.process_result = None

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None, priority=None,
                 tokenization_kwargs=None, mm_processor_kwargs=None):
        self.calls.append(("generate", prompts, sampling_params, lora_request))
        outs = []
        for i, (prompt, params) in enumerate(zip(prompts, sampling_params)):
            ids = list(reversed(prompt["prompt_token_ids"]))[: params.kwargs["max_tokens"]]
            logprobs = [{t: Logprob(-0.25 * (k + 1)), t + 1: Logprob(-9.0)} for k, t in enumerate(ids)]
            outs.append(RequestOutput(str(i), prompt["prompt_token_ids"],
                                      [CompletionOutput(0, "x" * len(ids), ids, None, logprobs, "length")]))
        return outs

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.calls.append(("collective_rpc", method))
        if self.worker is not None:
            return [getattr(self.worker, method)(*args, **(kwargs or {}))]
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        process = ctx.Process(target=_worker_process, args=(*args, results))
        process.start()
        self.process_result = results.get(timeout=120)
        process.join(30)
        return [self.process_result[0]]

    def sleep(self, level=1, mode="abort"):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))
        return True

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        self.calls.append(("reset_prefix_cache",))
        return True

    def get_tokenizer(self):
        return "tok"


class LoRARequest:  # vllm.lora.request.LoRARequest (a msgspec Struct)
    def __init__(self, lora_name, lora_int_id, lora_path="", base_model_name=None, load_inplace=False,
                 is_3d_lora_weight=False):
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path


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
    monkeypatch.setitem(sys.modules, "vllm.lora.request", types.SimpleNamespace(LoRARequest=LoRARequest))
    # the stand-in has no platforms module, whatever an earlier test in this process imported of the real vLLM
    monkeypatch.setitem(sys.modules, "vllm.platforms", None)
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
    (_, prompts, params, lora), = [c for c in llm.calls if c[0] == "generate"]
    assert lora is None
    assert [p["prompt_token_ids"] for p in prompts] == [[1, 2, 3], [7]] and len(params) == 2
    assert policy.tokenizer == "tok"


def _state(scale: float):
    import torch

    return {"embed.weight": torch.arange(12.0).reshape(4, 3) * scale, "head.weight": torch.full((2, 3), scale)}


def test_sleep_wake_and_weight_push(fake_vllm):
    """Level-1 sleep during the update; the push wakes the weights, streams them into the worker through
    the extension (no closure is shipped), drops cached prefixes, then wakes the KV cache."""
    pytest.importorskip("zmq")
    llm = FakeLLM()
    policy = VLLMPolicy("m", llm=llm, bucket_bytes=40)  # 48-byte embed alone, then head
    policy.sleep(level=1)
    policy.update_weights(_state(2.0))
    assert [c[0] for c in llm.calls] == ["sleep", "wake_up", "collective_rpc", "reset_prefix_cache", "wake_up"]
    assert llm.calls[1] == ("wake_up", ["weights"]) and llm.calls[2] == ("collective_rpc", RECEIVE_METHOD)
    assert llm.calls[4] == ("wake_up", ["kv_cache"]) and not policy.sleeping
    model = llm.worker.model_runner.model
    assert model.calls == 2 and model.params["embed.weight"][3, 2] == 22.0 and model.params["head.weight"][0, 0] == 2
    policy.sleep()
    policy.generate([GenerationRequest((1,), SamplingParams(max_tokens=1))])  # wakes itself up
    assert ("wake_up", None) in llm.calls and not policy.sleeping


def test_weight_push_to_a_worker_in_another_process(fake_vllm):
    """The engine core's worker in its own process (vLLM V1's default): the buckets cross a real ZMQ socket."""
    pytest.importorskip("zmq")
    llm = FakeLLM(worker="process")
    policy = VLLMPolicy("m", llm=llm, bucket_bytes=1 << 20)
    policy.update_weights(_state(-1.5))
    loaded, calls, params = llm.process_result
    assert loaded == 2 and calls == 1
    assert params["embed.weight"][1] == [-4.5, -6.0, -7.5] and params["head.weight"][1] == [-1.5] * 3


def test_buckets_respect_the_size_limit():
    torch = pytest.importorskip("torch")
    named = [(str(i), torch.zeros(n)) for i, n in enumerate([10, 10, 30, 5, 5])]  # float32: 40, 40, 120, 20, 20 B
    assert [[n for n, _ in b] for b in buckets(named, 80)] == [["0", "1"], ["2"], ["3", "4"]]


def test_a_worker_without_the_extension_is_a_clear_error(fake_vllm):
    pytest.importorskip("zmq")

    class NoExtension(FakeLLM):
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            raise AttributeError(f"'Worker' object has no attribute {method!r}")

    with pytest.raises(PolicyError, match="worker_extension_cls|no attribute"):
        push_weights(NoExtension(), _state(1.0).items(), timeout_s=2)


def test_lora_adapter_is_sent_not_merged(fake_vllm):
    llm = FakeLLM()
    policy = VLLMPolicy("m", llm=llm)
    policy.update_adapter("/runs/a/iteration-1")
    policy.update_adapter("/runs/a/iteration-2")
    policy.generate([GenerationRequest((1, 2), SamplingParams(max_tokens=1))])
    (_, _, _, lora), = [c for c in llm.calls if c[0] == "generate"]
    assert (lora.lora_name, lora.lora_int_id, lora.lora_path) == ("agentgym-2", 2, "/runs/a/iteration-2")
    assert not any(c[0] == "collective_rpc" for c in llm.calls)  # no weights were pushed


def test_an_engine_without_lora_layers_takes_merged_weights_not_adapters(fake_vllm):
    """The trainer sends an adapter only where the engine it started serves them (enable_lora); else merged
    weights (model.vllm.lora_push=merged)."""
    fake_vllm.LLM = lambda **kwargs: FakeLLM()
    assert VLLMPolicy("m", enable_lora=True).takes_adapters
    assert not VLLMPolicy("m").takes_adapters
    assert VLLMPolicy("m", llm=FakeLLM()).takes_adapters  # handed in: the caller knows what it serves


def test_engine_is_started_with_the_extension_and_processed_logprobs(fake_vllm):
    seen = {}
    fake_vllm.LLM = lambda **kwargs: seen.update(kwargs) or FakeLLM()
    VLLMPolicy("m", enable_lora=True)
    assert seen["worker_extension_cls"] == WORKER_EXTENSION and seen["logprobs_mode"] == "processed_logprobs"
    assert seen["enable_sleep_mode"] and seen["enable_lora"]
    with pytest.raises(PolicyError, match="tensor_parallel_size=1"):
        VLLMPolicy("m", tensor_parallel_size=2)


def _params(fn):
    return {p.name: (p.kind, p.default) for p in inspect.signature(fn).parameters.values()}


def test_fake_matches_the_installed_vllm():
    """Where vLLM is installed: every parameter the fake declares exists in the real method (same kind and
    default), the real method requires nothing the fake lacks, and the engine takes the arguments we pass."""
    vllm = pytest.importorskip("vllm")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.lora.request import LoRARequest as RealLoRARequest
    from vllm.v1.worker.gpu_worker import Worker

    empty, var = inspect.Parameter.empty, (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    for name in ("generate", "collective_rpc", "sleep", "wake_up", "reset_prefix_cache", "get_tokenizer"):
        real, fake = _params(getattr(vllm.LLM, name)), _params(getattr(FakeLLM, name))
        for param, spec in fake.items():
            assert param in real and real[param] == spec, (name, param, real.get(param), spec)
        assert not [p for p, (kind, default) in real.items() if default is empty and kind not in var and p not in fake]
    assert {"worker_extension_cls", "enable_sleep_mode", "logprobs_mode", "enable_lora", "max_lora_rank",
            "enable_prefix_caching"} <= set(EngineArgs.__dataclass_fields__)
    assert list(RealLoRARequest.__struct_fields__[:3]) == ["lora_name", "lora_int_id", "lora_path"]
    assert not [a for a in dir(WeightSyncWorker) if not a.startswith("__") and hasattr(Worker, a)]


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


@pytest.fixture(scope="module")
def hf_model_dir(tmp_path_factory):
    """The embedded SmolLM2 saved as a plain HF folder (vLLM loads safetensors; the trainer pushes HF names)."""
    _real_vllm()
    from agentgym.policies.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(device="cpu")
    path = tmp_path_factory.mktemp("smol-hf")
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path, model


@pytest.mark.vllm
@pytest.mark.gpu
def test_real_engine_generates_and_takes_pushed_weights(hf_model_dir):
    """On a GPU with vLLM: token ids and log-probs come back; pushing changed weights through the worker
    extension changes greedy output, and pushing the originals back restores it (after a sleep, too)."""
    _real_vllm()
    import torch

    path, model = hf_model_dir
    policy = VLLMPolicy(str(path), gpu_memory_utilization=0.3, enforce_eager=True, dtype="bfloat16")
    prompt = policy.tokenizer.apply_chat_template([{"role": "user", "content": "Name a colour."}],
                                                  add_generation_prompt=True)
    greedy = [GenerationRequest(tuple(prompt), SamplingParams(temperature=0, max_tokens=8))]
    gens = policy.generate(greedy + [GenerationRequest(tuple(prompt), SamplingParams(temperature=1.0, max_tokens=8,
                                                                                     seed=1))])
    for gen in gens:
        assert gen.finish_reason in ("stop", "length") and len(gen.logprobs) == len(gen.token_ids) > 0
        assert all(lp <= 0 for lp in gen.logprobs)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    changed = dict(original)
    changed["model.embed_tokens.weight"] = original["model.embed_tokens.weight"].roll(1, dims=0)
    policy.sleep(level=1)
    policy.update_weights(changed)
    assert policy.generate(greedy)[0].token_ids != gens[0].token_ids
    policy.update_weights(original)
    assert policy.generate(greedy)[0].token_ids == gens[0].token_ids
    torch.cuda.synchronize()


# ---------------------------------------------------------------- platform settings, no engine needed

def test_engine_settings_on_a_cpu_turn_sleep_off_and_fix_the_kv_cache():
    from agentgym.policies.vllm import CPU_KV_CACHE_GIB, engine_settings

    kwargs, env, notes = engine_settings(on_cpu=True, sleep_available=False, max_model_len=2048)
    assert kwargs["enable_sleep_mode"] is False and len(notes) == 1 and "sleep mode" in notes[0]
    assert kwargs["kv_cache_memory_bytes"] == int(CPU_KV_CACHE_GIB * (1 << 30)) and env == {}
    assert kwargs["enable_chunked_prefill"] is False and kwargs["max_num_batched_tokens"] == 4096
    assert engine_settings(on_cpu=True, sleep_available=False)[0]["max_num_batched_tokens"] == 32768
    with pytest.raises(PolicyError, match="refuses sleep mode"):
        engine_settings(on_cpu=True, sleep_available=False, enable_sleep_mode=True)
    _, env, _ = engine_settings(on_cpu=True, sleep_available=False, cpu_threads=2, kv_cache_gib=0.5)
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "2"}


def test_engine_settings_on_a_gpu_keep_vllms_defaults_and_refuse_cpu_options():
    from agentgym.policies.vllm import engine_settings

    kwargs, env, notes = engine_settings(on_cpu=False, sleep_available=True)
    assert kwargs == {"enable_sleep_mode": True} and env == {} and notes == []
    assert engine_settings(on_cpu=False, sleep_available=True, kv_cache_gib=4)[0]["kv_cache_memory_bytes"] == 4 << 30
    with pytest.raises(PolicyError, match="cpu_threads"):
        engine_settings(on_cpu=False, sleep_available=True, cpu_threads=2)
    with pytest.raises(PolicyError, match="kv_cache_gib"):
        engine_settings(on_cpu=False, sleep_available=True, kv_cache_gib=-1)


def test_an_engine_without_a_tokenizer_gets_stop_ids_and_decoded_text(fake_vllm):
    from agentgym.policies.vllm import single_token_ids

    class Tok:
        vocab = {"<|im_end|>": 3, "ab": 7}

        def encode(self, text, add_special_tokens=False):
            return [self.vocab[text]] if text in self.vocab else [1, 2]

        def decode(self, ids, skip_special_tokens=False):
            return "|".join(map(str, ids))

    assert single_token_ids(Tok(), ["<|im_end|>", "two tokens"]) == {"<|im_end|>": 3}
    params = to_vllm_sampling(fake_vllm, SamplingParams(stop=("<|im_end|>",)), {"<|im_end|>": 3})
    assert params.kwargs["stop"] is None and params.kwargs["stop_token_ids"] == [3]
    with pytest.raises(PolicyError, match="single tokens"):
        to_vllm_sampling(fake_vllm, SamplingParams(stop=("two tokens",)), {})
    out = RequestOutput("0", [1], [CompletionOutput(0, "", [4, 5], None, None, "length")])
    assert from_vllm_output(out, Tok()).text == "4|5" and from_vllm_output(out).text == ""


def test_a_dead_engine_wakes_a_blocked_generate():
    """vLLM's sync client leaves `generate` waiting on its output queue when the engine dies; the watcher
    puts an error there once the client's `engine_dead` flag is set."""
    import queue
    import threading

    from agentgym.policies.vllm import engine_is_dead, is_engine_dead, wake_on_engine_death

    resources = types.SimpleNamespace(engine_dead=False)
    core = types.SimpleNamespace(resources=resources, outputs_queue=queue.Queue())
    llm = types.SimpleNamespace(llm_engine=types.SimpleNamespace(engine_core=core))
    done = threading.Event()
    watcher = threading.Thread(target=wake_on_engine_death, args=(llm, done, 0.01))
    watcher.start()
    assert not engine_is_dead(llm)
    resources.engine_dead = True
    # the watcher imports vLLM's error class first: 10-30 s on a loaded 2-core machine when nothing imported it yet
    error = core.outputs_queue.get(timeout=120)
    watcher.join(10)
    assert engine_is_dead(llm) and is_engine_dead(error) and not watcher.is_alive()
    assert not is_engine_dead(ValueError("other"))
