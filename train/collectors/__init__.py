"""The collector registry: how an iteration's training batch is played.

One collector is chosen once from the config (`collector_name`) and built by the trainer (`build_collector`):
  - sync       play rollout.groups fresh tasks x rollout.group_size with the current weights, refilling
               under algorithm.dynamic_sampling (train/collectors/sync.py)
  - broadcast  train.distributed: rank 0 plays as `sync` does and broadcasts the batch to every rank
               (train/collectors/sync.py)
  - async      train.mode=async: rollout workers keep playing with the newest published weights while the
               trainer updates on finished groups (train/collectors/async_collector.py, train/async_rl.py), and
               with rollout.branching grow their branches too
  - lookahead  rollout.lookahead: greedy plays, then play-outs of other actions at chosen turns
               (train/collectors/lookahead.py)
  - gateway    gateway.harness / gateway.command: an outside harness's sessions through the OpenAI-compatible
               gateway (train/gateway/training.py; train_harness hands it a Python harness too)
  - selfplay   selfplay.enabled: matches on a multi-agent env, the learner in one or every seat, opponents
               from the league (train/collectors/selfplay.py, train/selfplay/)
  - branching  rollout.branching: the sync batch, then branches grown from env snapshots of some of its
               plays (train/collectors/branching.py)
Each is a class with its own state (`state_dict`: what a checkpoint keeps of it). Adding one is its file, one
`register_collector(name, "module:Class")` line and its test; `collector_name` says when it is chosen.
"""
from __future__ import annotations

import importlib
from typing import Any

_REGISTRY: dict[str, str | type] = {}


def register_collector(name: str, ref: str | type) -> None:
    """Add a collector class (or its "module:Class" path, imported when first built) under `name`."""
    _REGISTRY[name] = ref


def collectors() -> dict[str, str | type]:
    return dict(_REGISTRY)


def collector_class(name: str) -> type:
    ref = _REGISTRY[name]
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        ref = getattr(importlib.import_module(module), attr)
    return ref


def collector_name(config: Any, distributed: bool) -> str:
    """The collector that plays `config`'s batches (a TrainConfig); `distributed`: more than one rank."""
    if getattr(getattr(config, "gateway", None), "enabled", False):  # the config load refused what it cannot run with
        return "gateway"
    if getattr(getattr(config, "selfplay", None), "enabled", False):  # a config without the section: not self-play
        return "selfplay"
    if config.rollout.lookahead:
        return "lookahead"
    if config.train.mode == "async":  # with rollout.branching its workers grow the branches
        return "async"
    if config.rollout.branching.mode != "off":
        return "branching"
    return "broadcast" if distributed else "sync"


def build_collector(name: str, ctx: Any, state: dict[str, Any]) -> Any:
    """The collector `name`, given the trainer's CollectorContext and the checkpoint state ({} on a fresh run)."""
    return collector_class(name)(ctx, state)


_P = "agentgym.train.collectors."
register_collector("sync", _P + "sync:SyncCollector")
register_collector("broadcast", _P + "sync:BroadcastCollector")
register_collector("async", _P + "async_collector:AsyncCollector")
register_collector("lookahead", _P + "lookahead:LookaheadCollector")
register_collector("selfplay", _P + "selfplay:SelfPlayCollector")
register_collector("branching", _P + "branching:BranchingCollector")
register_collector("gateway", "agentgym.train.gateway.training:GatewayTrainCollector")  # an outside harness's sessions
