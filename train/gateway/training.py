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

From a config alone, `gateway.harness` or `gateway.command` (train/gateway_section.py) selects the same
collector, which then starts its own gateway and server in front of the trainer's policy: `agentgym train`
runs it, checkpoints and resume included.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from agentgym.errors import ConfigError
from agentgym.train.collectors import collector_class
from agentgym.train.collectors.base import Collected, Collector
from agentgym.train.gateway.app import GatewayServer
from agentgym.train.gateway.collector import GatewayCollector, Harness, command_harness
from agentgym.train.gateway.service import Gateway, GatewayConfig


class GatewayTrainCollector(Collector):
    """The trainer's collector registry entry "gateway" (train/collectors/): a `GatewayCollector`'s batches as
    `Collected`. It plays an outside harness: one handed to it (`attach`, `train_harness`), or the one the
    config's gateway section names, for which it starts a gateway and its server itself (closed by `close`)."""

    name = "gateway"

    def __init__(self, ctx: Any, state: dict[str, Any], inner: GatewayCollector | None = None):
        section = getattr(getattr(ctx, "config", None), "gateway", None)
        self.server: GatewayServer | None = None
        if inner is None:
            if section is None or not section.enabled:
                raise ConfigError("the gateway collector plays an outside harness: name it in the config "
                                  "(gateway.harness=module:function or gateway.command=PROGRAM) or train it with "
                                  "agentgym.train.gateway.training.train_harness(config, harness, tasks) "
                                  "(docs/guide/gateway.md)")
            inner = self._serve(ctx, section)
        super().__init__(ctx, state)
        self.inner = inner
        inner.next_seed = self.next_seed   # a resumed run goes on with fresh tasks

    def _serve(self, ctx: Any, section: Any) -> GatewayCollector:
        """A gateway in front of the trainer's rollout policy, its server on loopback, and the collector over them."""
        from agentgym.train.gateway_section import resolve, tasks_of

        r = ctx.config.rollout
        gateway = gateway_for(ctx.config, ctx.policy(), ctx.chat, section.workers)
        self.server = GatewayServer(gateway).start()
        return GatewayCollector(gateway, self.server.url, harness_of(section), tasks_of(section), groups=r.groups,
                                group_size=r.group_size, workers=section.workers, env_id=section.env_id,
                                reward_fn=resolve("reward_fn", section.reward_fn) if section.reward_fn else None,
                                seed_start=r.seed_start)

    def collect(self, iteration: int) -> Collected:
        batch, first, stats = self.inner.collect(iteration)
        self.next_seed = self.inner.next_seed
        if self.cfg.rollout.layout == "trajectory":   # one sequence per episode: a rewritten history has two
            split = next((t for t in batch if any("fold_message" in turn.info for turn in t.turns)), None)
            if split is not None:
                at = next(turn.info["call"] for turn in split.turns if "fold_message" in turn.info)
                raise ConfigError(f"a session of task {split.task_id!r} rewrote its history at call {at} (its prompt "
                                  "does not extend the earlier calls), so it is several token sequences; "
                                  "rollout.layout=trajectory trains one per episode: set rollout.layout=fold (one "
                                  "sample per segment) or rollout.layout=step (one per call)")
        return Collected(batch, first, stats)

    def close(self) -> None:
        if self.server is not None:   # the gateway this collector started for the config's harness
            self.server.stop()
            self.inner.gateway.close()
            self.server = None


def attach(trainer: Any, collector: GatewayCollector) -> None:
    """Make `trainer` collect through `collector`: its registry's "gateway" collector replaces the one it
    built, keeping that one's state (the next task seed)."""
    built = trainer.collector
    state = built.state_dict()
    built.close()
    trainer.collector = collector_class("gateway")(built.ctx, state, collector)


def harness_of(section: Any) -> Callable[..., Any]:
    """The harness the config's gateway section names: its program (`command`) or its callable (`harness`)."""
    from agentgym.train.gateway_section import resolve

    if section.command:
        return command_harness(section.command, section.command_timeout_s)
    return resolve("harness", section.harness)


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

    if config.train.verify_tokens:
        raise ConfigError("train.verify_tokens re-renders each episode from its env's conversation, which a harness's "
                          "session does not have: set train.verify_tokens=false (the gateway trains on the engine's own "
                          "ids; its tests check them against what the harness received)")
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
