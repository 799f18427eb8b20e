"""`vllm`: the vLLM engine (GPU), colocated with training; token ids in and out.

Written against vLLM's V1 offline API, versions 0.10.2 to 0.33 (pinned by the `vllm` extra):
`vllm.LLM(model, enable_prefix_caching=True, enable_sleep_mode=True, worker_extension_cls=...,
logprobs_mode="processed_logprobs", ...)`, `LLM.generate([TokensPrompt(prompt_token_ids=...)], [SamplingParams],
lora_request=...)`, `LLM.sleep(level)` / `LLM.wake_up(tags)` and `LLM.collective_rpc(method, args=...)`.

Weights (vLLM V1 runs the model in an engine-core process, so a closure cannot be shipped to it, and
pickling a state dict every iteration would be slow): the engine is started with
`worker_extension_cls="agentgym.policies.vllm.WeightSyncWorker"`, which gives each vLLM worker one method,
`agentgym_receive_weights(address)`. `update_weights` binds a ZMQ socket there, has every worker connect
through `collective_rpc` (on a helper thread), and streams the named tensors in buckets of `bucket_bytes`:
  - the worker in this very process (VLLM_ENABLE_V1_MULTIPROCESSING=0) takes the tensors as they are;
  - a worker process on the same GPU maps each CUDA bucket through a CUDA IPC handle (no host copy);
  - CPU tensors travel as bytes.
Each bucket is loaded with the model's own `load_weights` (HF names, sharding and fusing done by vLLM)
as it arrives, then prefixes cached with the old weights are dropped. With LoRA, `update_adapter(dir)`
makes a saved peft adapter the `LoRARequest` of every later request: no merge, no copy of the base
model. One worker per engine (tensor_parallel_size=1) is supported by this push.

Sleep mode: `sleep(1)` drops the KV cache and offloads the weights while the trainer updates;
`update_weights` wakes the weights first (so the KV cache is not allocated twice), loads, then wakes
the KV cache; `generate` wakes a sleeping engine itself.

Prompts go in as token ids (a multi-turn conversation shares its prefix with the previous turn, which
prefix caching reuses); the sampled ids and log-probs come back untouched. `logprobs_mode=
"processed_logprobs"` gives log-probs after temperature scaling, the convention of the `hf` policy and
of the trainer.
"""
from __future__ import annotations

import math
import os
import tempfile
import threading
import time
import uuid
from typing import Any, Iterable, Iterator, Sequence

from agentgym.errors import PolicyError, require
from agentgym.policies.base import BasePolicy, Generation, GenerationRequest, SamplingParams

WORKER_EXTENSION = "agentgym.policies.vllm.WeightSyncWorker"
RECEIVE_METHOD = "agentgym_receive_weights"
_LOCAL_BUCKETS: dict[str, list[tuple[str, Any]]] = {}  # buckets handed to a worker in this process


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


# ------------------------------------------------------------------------------------------ weight buckets

def buckets(named: Iterable[tuple[str, Any]], bucket_bytes: int) -> Iterator[list[tuple[str, Any]]]:
    """Consecutive groups of named tensors of at most `bucket_bytes` each (a larger tensor goes alone)."""
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def pack_bucket(bucket: list[tuple[str, Any]], worker_pid: int) -> tuple[dict[str, Any], Any]:
    """(a message for `WeightSyncWorker`, a buffer to keep alive until it is answered): a key into this
    process's buckets (the worker lives here), or one flat byte buffer (a CUDA IPC handle on a GPU, bytes
    otherwise) with each tensor's place in it."""
    if worker_pid == os.getpid():
        key = uuid.uuid4().hex
        _LOCAL_BUCKETS[key] = [(n, t.detach()) for n, t in bucket]
        return {"local": key}, None
    torch = require("torch", "vllm")
    items, offset = [], 0
    for name, t in bucket:
        items.append((name, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset))
        offset += t.numel() * t.element_size()
    flat = torch.cat([t.detach().contiguous().reshape(-1).view(torch.uint8) for _, t in bucket])
    if flat.is_cuda:
        from torch.multiprocessing.reductions import reduce_tensor

        return {"ipc": reduce_tensor(flat), "items": items}, flat
    return {"bytes": flat.numpy().tobytes(), "items": items}, None


def unpack_bucket(message: dict[str, Any], device: Any) -> list[tuple[str, Any]]:
    """The named tensors of a `pack_bucket` message, on `device` (views into one buffer)."""
    if "local" in message:
        return _LOCAL_BUCKETS.pop(message["local"])
    torch = require("torch", "vllm")
    if "ipc" in message:
        rebuild, args = message["ipc"]
        args = list(args)
        args[6] = getattr(device, "index", None) or 0  # this process's index of the same GPU
        flat = rebuild(*args)
    else:
        flat = torch.frombuffer(bytearray(message["bytes"]), dtype=torch.uint8).to(device)
    out = []
    for name, dtype, shape, offset in message["items"]:
        dt = getattr(torch, dtype)
        n = math.prod(shape) * torch.empty((), dtype=dt).element_size()
        out.append((name, flat[offset:offset + n].view(dt).view(shape)))
    return out


class WeightSyncWorker:
    """Mixed into each vLLM worker (`worker_extension_cls`). vLLM refuses an extension whose names clash
    with the worker's, so everything here starts with `agentgym_`."""

    def agentgym_receive_weights(self, address: str) -> int:
        """Connect to the trainer at `address`, load each bucket it sends; return the tensors loaded."""
        zmq = require("zmq", "vllm")
        socket = zmq.Context.instance().socket(zmq.REP)
        socket.connect(address)
        loaded = 0
        try:
            socket.recv_pyobj()  # hello: answer with our pid, which picks the transport
            socket.send_pyobj(os.getpid())
            while (message := socket.recv_pyobj()) is not None:
                weights = unpack_bucket(message, self.device)
                self.model_runner.model.load_weights(weights=weights)
                loaded += len(weights)
                del weights
                if getattr(self.device, "type", "") == "cuda":
                    require("torch", "vllm").cuda.synchronize(self.device)
                socket.send_pyobj(loaded)  # the trainer may reuse the bucket's memory now
            socket.send_pyobj(loaded)
        finally:
            socket.close(linger=0)
        return loaded


def push_weights(llm: Any, named: Iterable[tuple[str, Any]], bucket_bytes: int = 1 << 28,
                 timeout_s: float = 600.0) -> int:
    """Stream named tensors into the engine's worker through `WeightSyncWorker`; returns how many it loaded."""
    zmq = require("zmq", "vllm")
    address = f"ipc://{tempfile.gettempdir()}/agentgym-weights-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    socket = zmq.Context.instance().socket(zmq.REQ)
    socket.setsockopt(zmq.RCVTIMEO, 100)
    socket.setsockopt(zmq.SNDTIMEO, 100)
    socket.bind(address)
    answer: dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s

    def retry(call: Any) -> Any:
        """`call()` until it does not time out, giving up once the RPC has failed or the deadline passed."""
        while True:
            try:
                return call()
            except zmq.Again:
                if "error" in answer or time.monotonic() > deadline:
                    raise PolicyError(f"the vLLM worker did not take the weights: {answer.get('error') or 'timeout'} "
                                      f"(start the engine with worker_extension_cls={WORKER_EXTENSION!r})"
                                      ) from answer.get("error")

    def exchange(message: Any) -> Any:
        retry(lambda: socket.send_pyobj(message))
        return retry(socket.recv_pyobj)

    def rpc() -> None:
        try:
            answer["loaded"] = llm.collective_rpc(RECEIVE_METHOD, args=(address,))
        except BaseException as exc:  # re-raised below, in the trainer's thread
            answer["error"] = exc

    thread = threading.Thread(target=rpc, name="agentgym-weight-push", daemon=True)
    thread.start()
    try:
        worker_pid = exchange("hello")
        for bucket in buckets(named, bucket_bytes):
            message, keep_alive = pack_bucket(bucket, worker_pid)
            exchange(message)
            del keep_alive
        exchange(None)
    finally:
        socket.close(linger=0)
        thread.join(timeout_s)
        if address.startswith("ipc://") and os.path.exists(address[6:]):
            os.unlink(address[6:])
    if "error" in answer:
        raise PolicyError(f"pushing weights into vLLM failed: {answer['error']}") from answer["error"]
    return int(sum(answer.get("loaded") or [0]))


# ------------------------------------------------------------------------------------------ the policy

class VLLMPolicy(BasePolicy):
    """Generation with an in-process `vllm.LLM`; `sleep()`/`wake_up()` share the GPU with training."""

    def __init__(self, model: str, *, llm: Any = None, tokenizer: Any = None, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.5, enable_prefix_caching: bool = True,
                 enable_sleep_mode: bool = True, logprobs_mode: str | None = "processed_logprobs", seed: int = 0,
                 bucket_bytes: int = 1 << 28, **engine_kwargs: Any) -> None:
        self.vllm = require("vllm", "vllm")
        self.model_name = model
        if int(engine_kwargs.get("tensor_parallel_size", 1)) != 1:
            raise PolicyError("VLLMPolicy pushes weights into one worker: use tensor_parallel_size=1 "
                              "(several engines behind an OpenAI-compatible router scale out instead)")
        if llm is None:
            if logprobs_mode is not None:
                engine_kwargs["logprobs_mode"] = logprobs_mode
            engine_kwargs.setdefault("worker_extension_cls", WORKER_EXTENSION)
            try:
                llm = self.vllm.LLM(model=model, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                                    enable_prefix_caching=enable_prefix_caching,
                                    enable_sleep_mode=enable_sleep_mode, seed=seed, **engine_kwargs)
            except Exception as exc:  # vLLM raises many types; say which model and why
                raise PolicyError(f"vLLM could not start {model!r}: {type(exc).__name__}: {exc}") from exc
        self.llm = llm
        self._tokenizer = tokenizer
        self.bucket_bytes = bucket_bytes
        self.sleeping = False
        self.lora_request: Any = None
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
                outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self.lora_request)
            for i, output in zip(todo, outputs):
                results[i] = from_vllm_output(output)
        return results  # type: ignore[return-value]

    def sleep(self, level: int = 1) -> None:
        """Free the KV cache and offload the weights to CPU (level 1), or drop the weights too (2)."""
        if not self.sleeping:
            self.llm.sleep(level=level)
            self.sleeping = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.llm.wake_up(tags=tags)
        self.sleeping = bool(tags) and "kv_cache" not in tags

    def update_weights(self, state_dict: Any) -> None:
        """Push trained weights into the engine and drop cached prefixes computed with the old ones."""
        weights = list(_named_tensors(state_dict))
        if not weights:
            return
        with self._lock:
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

    def close(self) -> None:
        self.llm = None


def _named_tensors(state_dict: Any) -> Iterable[tuple[str, Any]]:
    if state_dict is None:
        return []
    if hasattr(state_dict, "state_dict"):  # a torch module
        state_dict = state_dict.state_dict()
    return state_dict.items() if hasattr(state_dict, "items") else state_dict
