"""Train an outside harness: the trainer's policy behind a gateway, the harness's sessions as its batches.

    from agentgym.train.config import load_config
    from agentgym.train.gateway.training import train_harness
    run_dir = train_harness(load_config("toy_learning", [...]), harness, tasks=lambda seed: {"seed": seed})

The trainer is built as `agentgym train` builds it (model, optimizer, rollout policy, guardrails, logging,
checkpoints); only its collection is replaced: each iteration the harness plays rollout.groups tasks x
rollout.group_size runs through the gateway, which fronts the trainer's own rollout policy (the `hf` policy
shares the trained module, so every update is live for the next call). Each call's prompt and completion
ids and sampler log-probs are the engine's, so the stale-weights guard (sampler vs trainer log-probs) reads
them as it reads any rollout. The config's env is not played; eval.every must be 0 (an in-training eval
plays the config's env, not the harness).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from agentgym.errors import ConfigError
from agentgym.train.gateway.app import GatewayServer
from agentgym.train.gateway.collector import GatewayCollector, Harness
from agentgym.train.gateway.service import Gateway, GatewayConfig


class TrainerCollector:
    """A `GatewayCollector` in the shape of the trainer's collector registry (train/collectors/base.py:
    `collect` -> `Collected`, `state_dict`, `eval_policy`, `take_weights`, `advance`, `close`)."""

    name = "gateway"

    def __init__(self, inner: GatewayCollector):
        self.inner = inner

    def collect(self, iteration: int) -> Any:
        from agentgym.train.collectors.base import Collected

        return Collected(*self.inner.collect(iteration))

    def state_dict(self) -> dict[str, Any]:
        return {"next_seed": self.inner.next_seed}

    def eval_policy(self) -> Any:
        return None

    def take_weights(self, model: Any, version: int) -> bool:
        return False   # the trainer pushes them to its policy, which the gateway generates with

    def advance(self, iteration: int) -> None:
        pass

    def close(self) -> None:
        pass


def attach(trainer: Any, collector: GatewayCollector) -> None:
    """Make `trainer` collect its batches through `collector`: as its collector object where the trainer has
    the collector registry, else in place of its `collect` method."""
    if hasattr(trainer, "collector"):
        if trainer.collector is not None:
            trainer.collector.close()
        trainer.collector = TrainerCollector(collector)
    else:
        trainer.collect = collector.collect


def gateway_for(config: Any, policy: Any, chat: Any, workers: int) -> Gateway:
    r = config.rollout
    return Gateway(policy, chat, GatewayConfig(max_new_tokens=r.max_new_tokens, max_context_tokens=None,
                                               max_sessions=max(workers, 1) * 2))


def train_harness(config: Any, harness: Harness, tasks: Callable[[int], Any], *, workers: int = 8,
                  reward_fn: Callable[[Any], float] | None = None, env_id: str = "gateway",
                  on_step: Callable[[int, dict[str, Any]], None] | None = None) -> Path:
    """Run config.train.iterations iterations on the harness's sessions; returns the run directory
    (metrics.jsonl holds each iteration's figures, `gateway/*` among them)."""
    from agentgym.train.trainer import Trainer

    if config.eval.every:
        raise ConfigError("eval.every plays the config's env, not the harness: set eval.every=0 to train a harness "
                          "through the gateway (its sessions' success is logged each iteration)")
    trainer = Trainer(config)
    gateway = gateway_for(config, trainer.policy, trainer.chat, workers)
    try:
        with GatewayServer(gateway) as server:
            r = config.rollout
            attach(trainer, GatewayCollector(gateway, server.url, harness, tasks, groups=r.groups,
                                             group_size=r.group_size, workers=workers, reward_fn=reward_fn,
                                             env_id=env_id, seed_start=r.seed_start))
            while trainer.iteration < config.train.iterations:
                metrics = trainer.step()
                if trainer.writer is not None:
                    trainer.writer.write(trainer.iteration - 1, metrics)
                if on_step is not None:
                    on_step(trainer.iteration - 1, metrics)
            trainer.save()   # the trained weights, as `agentgym train` leaves them (checkpoint:RUN_DIR serves them)
    finally:
        trainer.close()
        gateway.close()
    return trainer.run_dir
