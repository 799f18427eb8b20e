"""The config's `gateway` section: train an outside harness through the gateway from a config alone.

    agentgym train toy_learning gateway.harness=my_agent:run train.verify_tokens=false rollout.layout=trajectory
    agentgym train toy_learning "gateway.command=python3 my_agent.py" train.verify_tokens=false

With `gateway.harness` (a Python callable, "module:function") or `gateway.command` (a program) set, the
trainer's collector is "gateway" (train/collectors/): each iteration the harness runs rollout.groups tasks x
rollout.group_size times against a gateway on loopback fronting the trainer's rollout policy, and the sessions
are the batch. What that collection cannot serve is refused at load with the reason (`check_gateway`).

The section stands here, not in train/gateway/, because that folder's `train_harness` runs a Trainer: the
config must import nothing of a folder that imports it back (tests/test_architecture.py). The harness itself
is built where it is served (gateway/training.py's `harness_of`).
"""
from __future__ import annotations

import importlib
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from agentgym.errors import ConfigError


@dataclass(frozen=True)
class GatewaySection:
    harness: str = ""
    """"module:function" run once per session with a HarnessRun (base_url, api_key, task, seed, sample); it
    returns the session's reward, or None when the reward comes another way (train/gateway/collector.py)."""
    command: str = ""
    """A program run once per session instead (--base-url URL --api-key KEY --task JSON appended; a last stdout
    line {"reward": x} is its reward)."""
    command_timeout_s: float = 600.0
    """A program run longer than this fails its session (an infrastructure failure, left out of its group)."""
    tasks: str = ""
    """"module:function" mapping a task seed to the task a run is handed (JSON-able); "": {"seed": seed}."""
    reward_fn: str = ""
    """"module:function" scoring a finished Session that reported no reward; "": such a session fails."""
    workers: int = 8
    """Harness runs at once (the gateway admits twice as many sessions)."""
    env_id: str = "gateway"
    """The env id the sessions' trajectories carry in the logs."""

    @property
    def enabled(self) -> bool:
        return bool(self.harness or self.command)

    def __post_init__(self) -> None:
        if self.harness and self.command:
            raise ConfigError("gateway.harness and gateway.command both name the agent: set one of them")
        if self.workers < 1:
            raise ConfigError(f"gateway.workers must be >= 1, got {self.workers}")
        if self.command_timeout_s <= 0:
            raise ConfigError(f"gateway.command_timeout_s must be > 0, got {self.command_timeout_s}")
        for name in ("harness", "tasks", "reward_fn"):
            ref = getattr(self, name)
            if ref and (ref.count(":") != 1 or not all(ref.split(":"))):
                raise ConfigError(f"gateway.{name} must be \"module:function\" (an importable callable), got {ref!r}")


def resolve(name: str, ref: str) -> Callable[..., Any]:
    """The callable `ref` ("module:function") names, or a ConfigError that says what failed."""
    module, _, attr = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ConfigError(f"gateway.{name}={ref}: cannot import {module} ({exc}); put it on PYTHONPATH") from exc
    except AttributeError as exc:
        raise ConfigError(f"gateway.{name}={ref}: {module} has no {attr}") from exc
    if not callable(fn):
        raise ConfigError(f"gateway.{name}={ref} is not callable")
    return fn


def _argv(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"gateway.command={command!r} does not parse as a command line ({exc})") from exc


def tasks_of(section: GatewaySection) -> Callable[[int], Any]:
    return resolve("tasks", section.tasks) if section.tasks else (lambda seed: {"seed": seed})


def check_gateway(cfg: Any) -> None:
    """What training through the gateway cannot run with, refused with the reason and the fix (config load)."""
    t, r, a = cfg.train, cfg.rollout, cfg.algorithm
    off = "or drop gateway.harness / gateway.command"
    rules = [
        (t.mode == "sync", "train.mode=async keeps rollout workers playing while the trainer updates, with weights "
                           "published between turns; a harness's session calls the gateway whenever it likes, so "
                           "its calls could not be held to a published version or kept from the update: set "
                           f"train.mode=sync {off}"),
        (t.distributed == "none", f"the gateway serves one process's policy: set train.distributed=none {off}"),
        (not t.verify_tokens, "train.verify_tokens re-renders each episode from its env's conversation, which a "
                              "harness's session does not have: set train.verify_tokens=false (the gateway trains "
                              f"on the engine's own ids) {off}"),
        (not cfg.eval.every, f"eval.every plays the config's env, not the harness: set eval.every=0 {off}"),
        (r.action_mode == "generate", f"the harness's calls generate free text: set rollout.action_mode=generate {off}"),
        (not r.lookahead and r.branching.mode == "off",
         f"rollout.lookahead and rollout.branching restore env snapshots, which a harness has none of: turn them off "
         f"{off}"),
        (not a.dynamic_sampling, "algorithm.dynamic_sampling refills dropped groups with more tasks, which the "
                                 f"gateway collector does not play: set algorithm.dynamic_sampling=false {off}"),
        (not cfg.sft.enabled, f"sft plays the config's env's expert, not the harness: set sft.enabled=false {off}"),
        (not cfg.selfplay.enabled, f"self-play pits the config's env's players, not a harness: set "
                                   f"selfplay.enabled=false {off}"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(message)
    g = cfg.gateway
    if g.harness:   # an unimportable harness, tasks or reward function fails here, not an iteration in
        resolve("harness", g.harness)
    elif not _argv(g.command):
        raise ConfigError(f"gateway.command={g.command!r} names no program: give the program that runs the agent once")
    tasks_of(g)
    if g.reward_fn:
        resolve("reward_fn", g.reward_fn)
