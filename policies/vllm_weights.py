"""Pushing trained weights into a running vLLM engine, whose worker lives in another process.

vLLM V1 runs the model in an engine-core (and, on CPU, a worker) process, so a closure cannot be shipped
to it, and pickling a state dict every iteration would be slow. The engine is started with
`worker_extension_cls="agentgym.policies.vllm_weights.WeightSyncWorker"`, which gives each vLLM worker one
method, `agentgym_receive_weights(address)`. `push_weights` binds a ZMQ socket there, has every worker
connect through `collective_rpc` (on a helper thread), and streams the named tensors in buckets of
`bucket_bytes`:
  - the worker in this very process (VLLM_ENABLE_V1_MULTIPROCESSING=0) takes the tensors as they are;
  - a worker process on the same GPU maps each CUDA bucket through a CUDA IPC handle (no host copy);
  - CPU tensors travel as bytes (the CPU build of vLLM: measured 1.6 s for SmolLM2-135M's 540 MB).
Each bucket is loaded with the model's own `load_weights` (HF names, sharding and fusing done by vLLM)
as it arrives. One worker per engine (tensor_parallel_size=1) is supported.
"""
from __future__ import annotations

import math
import os
import tempfile
import threading
import time
import uuid
from typing import Any, Iterable, Iterator

from agentgym.errors import PolicyError, require

WORKER_EXTENSION = "agentgym.policies.vllm_weights.WeightSyncWorker"
RECEIVE_METHOD = "agentgym_receive_weights"
_LOCAL_BUCKETS: dict[str, list[tuple[str, Any]]] = {}  # buckets handed to a worker in this process


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

    device: Any        # the worker's, once mixed in
    model_runner: Any

    def agentgym_receive_weights(self, address: str) -> int:
        """Connect to the trainer at `address`, load each bucket it sends; return the tensors loaded.

        Where the model runner can reload weights in place (vLLM >= 0.3x: `reload_weights`), the buckets
        feed that as one stream: it puts each layer back in checkpoint form, loads it, and redoes the
        processing done after loading — which the CPU build needs, since it repacks every linear weight
        for oneDNN and drops the original (`load_weights` alone then fails with "no attribute
        'weight_loader'"). Such a push must hold every weight of the layers it touches (the trainer sends
        the whole state dict). Older runners load each bucket with the model's `load_weights`."""
        zmq = require("zmq", "vllm")
        socket = zmq.Context.instance().socket(zmq.REP)
        socket.connect(address)
        count = [0]
        on_gpu = getattr(self.device, "type", "") == "cuda"

        def stream() -> Iterator[tuple[str, Any]]:
            while (message := socket.recv_pyobj()) is not None:
                weights = unpack_bucket(message, self.device)
                if on_gpu and "ipc" in message:  # the loader may keep tensors past this bucket's answer
                    weights = [(name, tensor.clone()) for name, tensor in weights]
                yield from weights
                count[0] += len(weights)
                del weights
                if on_gpu:
                    require("torch", "vllm").cuda.synchronize(self.device)
                socket.send_pyobj(count[0])  # the trainer may reuse the bucket's memory now

        try:
            socket.recv_pyobj()  # hello: answer with our pid, which picks the transport
            socket.send_pyobj(os.getpid())
            reload = getattr(self.model_runner, "reload_weights", None)
            if callable(reload):
                reload(weights_iterator=stream(), is_checkpoint_format=True)
            else:
                while (message := socket.recv_pyobj()) is not None:
                    weights = unpack_bucket(message, self.device)
                    self.model_runner.model.load_weights(weights=weights)
                    count[0] += len(weights)
                    del weights
                    if on_gpu:
                        require("torch", "vllm").cuda.synchronize(self.device)
                    socket.send_pyobj(count[0])  # loaded: the trainer may reuse the bucket's memory now
            socket.send_pyobj(count[0])
        finally:
            socket.close(linger=0)
        return count[0]


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


def named_tensors(state_dict: Any) -> Iterable[tuple[str, Any]]:
    """(name, tensor) pairs from a state dict, a torch module or an iterable of pairs."""
    if state_dict is None:
        return []
    if hasattr(state_dict, "state_dict"):  # a torch module
        state_dict = state_dict.state_dict()
    return state_dict.items() if hasattr(state_dict, "items") else state_dict
