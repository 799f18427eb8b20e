"""`vllm`: the in-process vLLM engine (GPU), colocated with training; token ids in and out.

Written against vLLM's documented offline API: `vllm.LLM(model, enable_prefix_caching=True,
enable_sleep_mode=True, ...)`, `LLM.generate([TokensPrompt(prompt_token_ids=...)], [SamplingParams])`,
`LLM.sleep(level)` / `LLM.wake_up(tags)` to hand GPU memory to the trainer between rollouts, and weight
pushes with `LLM.collective_rpc` / `LLM.apply_model` -> `model.load_weights(...)` (falling back to the
in-process driver worker's model where those are missing).

Prompts go in as token ids (a multi-turn conversation shares its prefix with the previous turn, which
prefix caching reuses) and the sampled ids and the sampled tokens' logprobs (`logprobs=0`: the sampled
token only) come back untouched. vLLM's logprobs are of the raw logits by default (temperature 1); pass
`logprobs_mode="processed_logprobs"` to get them after temperature scaling, which is what the `hf`
policy records (see hf.py). The trainer must recompute with the same convention.

vLLM cannot be installed on CPU machines: the conversion code is plain functions, unit-tested with
objects shaped like vLLM's; the engine tests are marked `vllm` and `gpu`.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Iterable, Sequence

from agentgym.errors import PolicyError, require
from agentgym.policies.base import BasePolicy, Generation, GenerationRequest, SamplingParams


def to_vllm_sampling(vllm: Any, sampling: SamplingParams) -> Any:
    """Our SamplingParams -> `vllm.SamplingParams` (stop strings kept in the output, like `hf`)."""
    return vllm.SamplingParams(
        n=1, temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
        stop=list(sampling.stop) or None, seed=sampling.seed, logprobs=0,
        include_stop_str_in_output=True, skip_special_tokens=False)


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


def from_vllm_output(output: Any) -> Generation:
    """One `RequestOutput` -> Generation ("abort" and other reasons become "error")."""
    if not getattr(output, "outputs", None):
        return Generation((), "", (), "error", "vLLM returned no completion for this request")
    completion = output.outputs[0]
    ids = tuple(int(t) for t in completion.token_ids)
    reason = completion.finish_reason
    if reason in ("stop", "length"):
        return Generation(ids, completion.text, sampled_logprobs(ids, completion.logprobs), reason)
    return Generation(ids, completion.text, sampled_logprobs(ids, completion.logprobs), "error",
                      f"vLLM finished the request with reason {reason!r}")


class VLLMPolicy(BasePolicy):
    """Generation with an in-process `vllm.LLM`; `sleep()`/`wake_up()` share the GPU with training."""

    def __init__(self, model: str, *, llm: Any = None, tokenizer: Any = None, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.5, enable_prefix_caching: bool = True,
                 enable_sleep_mode: bool = True, logprobs_mode: str | None = None, seed: int = 0,
                 **engine_kwargs: Any) -> None:
        self.vllm = require("vllm", "vllm")
        self.model_name = model
        if llm is None:
            if logprobs_mode is not None:
                engine_kwargs["logprobs_mode"] = logprobs_mode
            try:
                llm = self.vllm.LLM(model=model, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                                    enable_prefix_caching=enable_prefix_caching,
                                    enable_sleep_mode=enable_sleep_mode, seed=seed, **engine_kwargs)
            except Exception as exc:  # vLLM raises many types; say which model and why
                raise PolicyError(f"vLLM could not start {model!r}: {type(exc).__name__}: {exc}") from exc
        self.llm = llm
        self._tokenizer = tokenizer
        self.sleeping = False
        self._lock = threading.Lock()

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
                if self.sleeping:
                    self.wake_up()
                prompts = [to_vllm_prompt(self.vllm, requests[i]) for i in todo]
                params = [to_vllm_sampling(self.vllm, requests[i].sampling) for i in todo]
                outputs = self.llm.generate(prompts, params, use_tqdm=False)
            for i, output in zip(todo, outputs):
                results[i] = from_vllm_output(output)
        return results  # type: ignore[return-value]

    def sleep(self, level: int = 1) -> None:
        """Free the KV cache (level 1 also offloads weights to CPU; 2 drops them) for the trainer."""
        self.llm.sleep(level=level)
        self.sleeping = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.llm.wake_up(tags=tags) if tags else self.llm.wake_up()
        self.sleeping = bool(tags) and "kv_cache" not in tags

    def update_weights(self, state_dict: Any) -> None:
        """Push trained weights into the engine and drop cached prefixes computed with the old ones."""
        weights = list(_named_tensors(state_dict))
        if not weights:
            return
        if self.sleeping:  # weights first, so the KV cache is not allocated twice
            self.wake_up(tags=["weights"])
        load_weights_into(self.llm, weights)
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:
            reset()
        if self.sleeping:
            self.wake_up(tags=["kv_cache"])
            self.sleeping = False

    def close(self) -> None:
        self.llm = None


def _named_tensors(state_dict: Any) -> Iterable[tuple[str, Any]]:
    if state_dict is None:
        return []
    if hasattr(state_dict, "state_dict"):  # a torch module
        state_dict = state_dict.state_dict()
    return state_dict.items() if hasattr(state_dict, "items") else state_dict


def _load_into_model(model: Any, weights: list[tuple[str, Any]]) -> None:
    model.load_weights(weights=weights)


def load_weights_into(llm: Any, weights: list[tuple[str, Any]]) -> None:
    """`model.load_weights` in every worker: `apply_model` where vLLM has it, else the driver worker."""
    if hasattr(llm, "apply_model"):
        llm.apply_model(lambda model: _load_into_model(model, weights))
        return
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    worker = getattr(executor, "driver_worker", None)
    worker = getattr(worker, "worker", worker)  # V1 wraps the worker once more
    model = getattr(getattr(worker, "model_runner", None), "model", None)
    if model is None:
        raise PolicyError("cannot reach the vLLM model to load weights: use a vLLM with LLM.apply_model, or "
                          "run it in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0)")
    _load_into_model(model, weights)
