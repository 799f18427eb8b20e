"""Concurrent calls -> batched `policy.generate`: one worker thread, one batch at a time.

Every session's call waits in one bounded queue; the worker takes what is waiting (up to `max_batch`) and
hands it to the policy as one batch, so sessions that call at the same time share a forward pass (the `hf`
policy batches rows of any sampling settings; a vLLM or remote engine schedules them itself). A full queue
refuses the call at once (429, the OpenAI client's cue to back off and retry) instead of letting waits grow.
"""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Any

from agentgym.policy import Generation, GenerationRequest
from agentgym.train.gateway.protocol import GatewayError


class Engine:
    def __init__(self, policy: Any, max_batch: int = 32, max_waiting: int = 1024):
        self.policy, self.max_batch, self.max_waiting = policy, max_batch, max_waiting
        self._queue: queue.Queue[tuple[GenerationRequest, Future] | None] = queue.Queue()
        self._lock = threading.Lock()    # one generate at a time, also for callers outside the worker
        self.batches = 0
        self.rows = 0
        self._thread = threading.Thread(target=self._work, name="gateway-engine", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest) -> Future:
        """A future of the request's Generation; a 429 GatewayError when `max_waiting` calls wait already."""
        if self._queue.qsize() >= self.max_waiting:
            raise GatewayError(429, f"{self.max_waiting} calls are waiting for the engine; retry shortly",
                               "rate_limit_error", code="engine_busy")
        future: Future = Future()
        self._queue.put((request, future))
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
            live = [(r, f) for r, f in batch if f.set_running_or_notify_cancel()]
            if live:
                self._run(live)

    def _run(self, batch: list[tuple[GenerationRequest, Future]]) -> None:
        start = time.perf_counter()
        try:
            with self._lock:
                generations = self.policy.generate([r for r, _ in batch])
        except Exception as exc:  # the engine failed: every call of the batch gets the error, the gateway lives
            for _, f in batch:
                f.set_exception(exc)
            return
        took = time.perf_counter() - start
        self.batches += 1
        self.rows += len(batch)
        for (_, f), g in zip(batch, generations):
            f.set_result((g, took))

    def generate_now(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Generate outside the queue (the benchmark's direct baseline), serialised with the worker."""
        with self._lock:
            return self.policy.generate(requests)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)
