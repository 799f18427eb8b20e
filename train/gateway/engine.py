"""Concurrent calls -> batched `policy.generate`: one worker thread, one batch at a time.

Every session's call waits in one bounded queue; the worker takes what is waiting (up to `max_batch`) and
hands it to the policy as one batch, so sessions that call at the same time share a forward pass (the `hf`
policy batches rows of any sampling settings; a vLLM or remote engine schedules them itself). A full queue
refuses the call at once (429, the OpenAI client's cue to back off and retry) instead of letting waits grow.

A call may listen to its tokens as they are sampled (`submit(..., on_token=)`, streaming): where the policy
has the `on_token` hook (the `hf` policy), the engine routes each sampled token of the batch to its call's
listener while the batch generates.
"""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from agentgym.policy import Generation, GenerationRequest
from agentgym.train.gateway.protocol import GatewayError


Listener = Callable[[int], None] | None
"""A call's per-token listener (streaming), or None."""


class Engine:
    def __init__(self, policy: Any, max_batch: int = 32, max_waiting: int = 1024):
        self.policy, self.max_batch, self.max_waiting = policy, max_batch, max_waiting
        self._queue: queue.Queue[tuple[GenerationRequest, Future, Listener] | None] = queue.Queue()
        self._lock = threading.Lock()    # one generate at a time, also for callers outside the worker
        self.batches = 0
        self.rows = 0
        self._thread = threading.Thread(target=self._work, name="gateway-engine", daemon=True)
        self._thread.start()

    @property
    def streams(self) -> bool:
        """Whether the policy reports tokens as it samples them (else a listener hears nothing)."""
        return hasattr(self.policy, "on_token")

    def submit(self, request: GenerationRequest, on_token: Listener = None) -> Future:
        """A future of the request's Generation; a 429 GatewayError when `max_waiting` calls wait already.
        `on_token(token_id)` is called from the engine's thread as each of its tokens is sampled."""
        if self._queue.qsize() >= self.max_waiting:
            raise GatewayError(429, f"{self.max_waiting} calls are waiting for the engine; retry shortly",
                               "rate_limit_error", code="engine_busy")
        future: Future = Future()
        self._queue.put((request, future, on_token))
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(more)
            live = [(r, f, t) for r, f, t in batch if f.set_running_or_notify_cancel()]
            if live:
                self._run(live)

    def _run(self, batch: list[tuple[GenerationRequest, Future, Listener]]) -> None:
        start = time.perf_counter()
        listeners = [t for _, _, t in batch]
        try:
            with self._lock:
                if self.streams and any(listeners):
                    def route(i: int, token: int) -> None:
                        listener = listeners[i]
                        if listener is not None:
                            listener(token)

                    self.policy.on_token = route
                try:
                    generations = self.policy.generate([r for r, _, _ in batch])
                finally:
                    if self.streams:
                        self.policy.on_token = None
        except Exception as exc:  # the engine failed: every call of the batch gets the error, the gateway lives
            for _, f, _ in batch:
                f.set_exception(exc)
            return
        took = time.perf_counter() - start
        self.batches += 1
        self.rows += len(batch)
        for (_, f, _), g in zip(batch, generations):
            f.set_result((g, took))

    def generate_now(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Generate outside the queue (the benchmark's direct baseline), serialised with the worker."""
        with self._lock:
            return self.policy.generate(requests)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)
