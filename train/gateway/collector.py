"""The gateway's training side: G harness runs per task through the gateway -> the trainer's batch.

    collector = GatewayCollector(gateway, server.url, harness, tasks, groups=4, group_size=8)
    batch, first, stats = collector.collect(iteration)   # what Trainer.collect returns (sync collection)

A `harness` is any callable that runs the outside agent once against the gateway: it gets a `HarnessRun`
(the base URL, the API key that names its session, the task) and returns the run's reward, or None when the
reward comes another way (the harness POSTs it to /v1/sessions/{id}/reward or .../close, or the collector's
`reward_fn` scores the finished session). `command_harness` wraps a program run as a subprocess. Each task
is played `group_size` times (a GRPO group: the same task through the harness G times), its sessions become
one `Trajectory` each (`merge.session_trajectory`) with the group's id, and failed runs (the harness raised,
or no reward came) are dropped like failed episodes, with the groups they leave too small.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from agentgym.errors import ConfigError
from agentgym.trajectory import Trajectory
from agentgym.train.collectors.base import drop_failed
from agentgym.train.gateway.merge import segments, session_trajectory
from agentgym.train.gateway.service import Gateway
from agentgym.train.gateway.sessions import Session
from agentgym.train.guardrails import drop_mixed_groups


@dataclass(frozen=True)
class HarnessRun:
    """What one harness run is told: where the gateway is, its session (the API key) and its task."""

    base_url: str
    api_key: str
    task: Any
    seed: int
    sample: int


Harness = Callable[[HarnessRun], "float | None"]


def command_harness(command: str | Sequence[str], timeout_s: float = 600.0) -> Harness:
    """A harness program run once per session: `command` gets `--base-url URL --api-key KEY --task JSON`
    appended; a last stdout line `{"reward": x}` is its reward (else the reward comes another way). A
    non-zero exit fails the session with the program's last stderr line."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ConfigError("the harness command is empty; give the program that runs the agent once")

    def run(h: HarnessRun) -> float | None:
        done = subprocess.run([*argv, "--base-url", h.base_url, "--api-key", h.api_key, "--task", json.dumps(h.task)],
                              capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise RuntimeError(f"harness exited {done.returncode}: {last}")
        lines = done.stdout.strip().splitlines()
        try:
            out = json.loads(lines[-1]) if lines else None
        except ValueError:
            return None
        return float(out["reward"]) if isinstance(out, dict) and "reward" in out else None

    return run


def session_figures(sessions: Sequence[Session]) -> dict[str, float]:
    """What the gateway saw of a batch's sessions: calls, segments, re-tokenised history, lost calls."""
    calls = [c for s in sessions for c in s.calls]
    n_seg = [len(segments(s.calls)) for s in sessions if s.calls]
    history = sum(c.spliced + c.retokenized for c in calls)
    return {"gateway/sessions": float(len(sessions)), "gateway/calls": float(len(calls)),
            "gateway/calls_per_session": len(calls) / max(1, len(sessions)),
            "gateway/segments_per_session": float(np.mean(n_seg)) if n_seg else 0.0,
            "gateway/retokenized_share": sum(c.retokenized for c in calls) / history if history else 0.0,
            "gateway/lost_calls": float(sum(s.lost_calls for s in sessions)),
            "gateway/failed_sessions": float(sum(s.error is not None or s.reward is None for s in sessions))}


class GatewayCollector:
    """Plays `groups` tasks x `group_size` harness runs through `gateway` per `collect`; `tasks(seed)` gives
    the task a harness is handed (JSON-able), seeds counting up from `seed_start`."""

    def __init__(self, gateway: Gateway, base_url: str, harness: Harness, tasks: Callable[[int], Any], *,
                 groups: int, group_size: int, workers: int = 8, reward_fn: Callable[[Session], float] | None = None,
                 env_id: str = "gateway", seed_start: int = 0, min_group: int = 2, success_at: float = 1.0):
        if groups < 1 or group_size < 1 or workers < 1:
            raise ConfigError(f"groups, group_size and workers must be >= 1, got {groups}, {group_size}, {workers}")
        if workers > gateway.config.max_sessions:
            raise ConfigError(f"workers={workers} would open more sessions than the gateway's max_sessions="
                              f"{gateway.config.max_sessions}; lower workers or raise max_sessions")
        self.gateway, self.base_url, self.harness, self.tasks = gateway, base_url, harness, tasks
        self.groups, self.group_size, self.workers = groups, group_size, workers
        self.reward_fn, self.env_id, self.min_group, self.success_at = reward_fn, env_id, min_group, success_at
        self.next_seed = seed_start

    def _play(self, seed: int, group_id: int, sample: int) -> Session:
        task = self.tasks(seed)
        session = self.gateway.open_session(task, group_id, sample)
        try:
            got = self.harness(HarnessRun(self.base_url, session.id, task, seed, sample))
        except Exception as exc:  # the harness failed: the session is kept as an error, not a failure
            error = f"{type(exc).__name__}: {exc}"[:500]
            if session.status == "open":
                self.gateway.close_session(session.id, error=error)
            session.error = session.error or error
            return self.gateway.store.pop(session.id)
        if session.status == "open":
            self.gateway.close_session(session.id)
        if got is not None and session.reward is None:
            self.gateway.reward(session.id, float(got))
        if session.reward is None and self.reward_fn is not None and session.error is None:
            self.gateway.reward(session.id, float(self.reward_fn(session)))
        return self.gateway.store.pop(session.id)

    def collect(self, iteration: int) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(training batch, every finished session's trajectory, stats), as the trainer's sync collection."""
        self.gateway.version = iteration
        seeds = list(range(self.next_seed, self.next_seed + self.groups))
        self.next_seed += self.groups
        jobs = [(seed, seed, k) for seed in seeds for k in range(self.group_size)]
        start = time.perf_counter()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="gateway-harness") as pool:
            sessions = list(pool.map(lambda job: self._play(*job), jobs))
        took = time.perf_counter() - start
        first = [session_trajectory(s, s.group, s.sample, self.env_id, success_at=self.success_at) for s in sessions]
        batch, failed = drop_failed(first, min(self.min_group, self.group_size))
        batch, mixed = drop_mixed_groups(batch)  # a group must be G runs of one task: the same first prompt
        figures = session_figures(sessions)
        stale = sum(c.policy_version < iteration for s in sessions for c in s.calls)
        return batch, first, {**failed, "groups_not_one_task": float(mixed), **figures,
                              "gateway/stale_calls": float(stale),
                              "gateway/calls_per_s": figures["gateway/calls"] / max(took, 1e-9)}

    def batches(self, iterations: int, start: int = 0) -> Iterator[tuple[list[Trajectory], list[Trajectory],
                                                                          dict[str, float]]]:
        for iteration in range(start, start + iterations):
            yield self.collect(iteration)
