"""The rollout config: how episodes are run, with one set of defaults (`agentgym.engine.rollout` runs them)."""
from __future__ import annotations

from dataclasses import dataclass, field

from agentgym.engine.vector import EXECUTORS
from agentgym.errors import ConfigError
from agentgym.policy import SamplingParams

LAYOUTS = ("trajectory", "step", "fold")


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are run: the one rollout config, with one set of defaults. Training embeds it (the train
    config's `rollout:` section is a subclass that adds the env, group sizes and action mode), SFT's
    demonstrations and in-training evals use that same section, and `agentgym eval` takes its defaults from
    here. Validated at construction; bad values raise `ConfigError`."""

    max_turns: int | None = None
    """Turn limit; None = the env's registered limit."""
    layout: str = "trajectory"
    """"trajectory": one growing sequence per episode; "step": each turn's prompt is a history window; "fold":
    a growing sequence whose older turns are folded into a summary once it passes `fold_at_tokens`."""
    history_turns: int = 2
    """Step layout: past turns kept in each turn's prompt."""
    max_context_tokens: int | None = 8192
    """End an episode when its next prompt + the turn's tokens would exceed this (or the policy's own limit)."""
    max_observation_tokens: int | None = None
    """Truncate each observation to this many tokens (with a marker); None = whole."""
    fold_at_tokens: int | None = None
    """Fold layout: fold once a prompt + a turn's tokens would pass this; None = 3/4 of the context limit."""
    fold_summary: bool = True
    """Fold layout: the model writes a summary turn (trained like any action) before each fold; False folds
    with the env's state summary only."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    executor: str = "thread"
    """How envs step: serial, thread, process or ray."""
    env_workers: int = 0
    """Threads / processes / actors stepping envs; 0 = automatic (threads: one per env up to 64; processes:
    one per core)."""
    max_envs: int = 0
    """At most this many envs (one per episode in flight) at once; a rollout of more episodes plays them in
    waves of whole groups on the same envs. 0 = every episode at once. For envs that each hold a heavy
    resource: a ScienceWorld env is a JVM (~220 MB), so a 64-task eval at once held 14 GB."""
    async_mode: bool = False
    """Queue each env's next request as soon as its step returns (suits servers that batch)."""
    max_inflight_batches: int = 1
    """Async mode: generate calls at once."""
    env_timeout_s: float | None = None
    """An env step slower than this fails its episode; None = no limit."""
    keep_task: bool = True
    """Step layout: restate the task (info["task"], else the first observation) once it leaves the window."""
    ray_address: str = ""
    """executor=ray: the Ray cluster to join ("HOST:6379" of `ray start --head`, "auto"); "" starts a local one."""
    history_key_depth: int = 4
    """Turn.history holds hashes of the last 1..depth turns (HGPO's step groups)."""

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"rollout.max_turns must be >= 1 or None, got {self.max_turns}")
        if self.layout not in LAYOUTS:
            raise ConfigError(f"rollout.layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.history_key_depth < 0:
            raise ConfigError(f"rollout.history_key_depth must be >= 0, got {self.history_key_depth}")
        if self.history_turns < 0:
            raise ConfigError(f"rollout.history_turns must be >= 0, got {self.history_turns}")
        if self.layout == "fold" and self.max_context_tokens is None and self.fold_at_tokens is None:
            raise ConfigError("rollout.layout=fold folds at a budget: set rollout.max_context_tokens or "
                              "rollout.fold_at_tokens")
        for name in ("max_context_tokens", "max_observation_tokens", "fold_at_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"rollout.{name} must be >= 1 or None, got {value}")
        if self.executor not in EXECUTORS:
            raise ConfigError(f"rollout.executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.max_envs < 0:
            raise ConfigError(f"rollout.max_envs must be >= 0 (0 = every episode at once), got {self.max_envs}")
        if self.env_workers < 0 or self.max_inflight_batches < 1:
            raise ConfigError("rollout.env_workers must be >= 0 and rollout.max_inflight_batches >= 1")
        if not isinstance(self.sampling, SamplingParams):
            raise ConfigError(f"rollout.sampling must be a SamplingParams, got {type(self.sampling).__name__}")
