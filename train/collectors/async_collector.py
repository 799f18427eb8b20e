"""train.mode=async: rollout workers (train/async_rl.py) keep playing with the newest weights they have while
the trainer updates on finished groups. This module holds the collector and the async options' checks.
With rollout.branching a worker grows its chunk's branches after playing it (train/collectors/branching.py)."""
from __future__ import annotations

import dataclasses
from typing import Any

from agentgym.train.collectors.base import (refuse_unless, Collected, Collector, CollectorContext, scored_usable,
                                            turn_cap, usable)
from agentgym.trajectory import Trajectory


class AsyncCollector(Collector):
    name = "async"

    def __init__(self, ctx: CollectorContext, state: dict[str, Any]):
        from agentgym.train.async_rl import AsyncRollouts, VersionedPolicy, WeightBox

        super().__init__(ctx, state)
        t = self.cfg.train
        self.brancher = None
        if self.cfg.rollout.branching.mode != "off":
            from agentgym.train.collectors.branching import Brancher

            self.brancher = Brancher(ctx)
        pending = [[Trajectory.from_dict(t) for t in g] for g in state.get("async_pending") or ()]
        # a vLLM engine takes the published weights itself; the HF policy generates with its own copy of the
        # model, so the trainer can update while it plays
        inner = ctx.make_rollout_policy() if ctx.make_rollout_policy is not None else ctx.policy()
        self.side = AsyncRollouts(VersionedPolicy(inner, WeightBox(ctx.iteration)), self.play,
                                  groups=self.cfg.rollout.groups, group_size=self.cfg.rollout.group_size,
                                  chunk=t.groups_per_rollout, workers=t.rollout_workers,
                                  max_staleness=t.max_staleness, next_seed=self.next_seed, iteration=ctx.iteration,
                                  pending=pending, in_flight=state.get("async_in_flight") or (),
                                  start_order=t.batch_order == "start")

    def play(self, seeds: list[int], policy: Any, version: int) -> list[Trajectory]:
        """One rollout worker's chunk: the groups of `seeds`, played as the sync trainer plays a batch, then
        with rollout.branching their branches, grown with the same weights."""
        r = self.cfg.rollout
        config = self.ctx.rollout_config(turn_cap(self.cfg, version), r.temperature, self.cfg.train.seed)
        played = self.ctx.play(seeds, r.group_size, config, "train", policy)
        if self.brancher is None:
            return played
        return played + self.brancher.grow(usable(played, r.group_size)[0], policy, config, seeds)

    def collect(self, iteration: int) -> Collected:
        """rollout.groups finished groups off the queue (batch: after drops; first: before); with
        rollout.branching, each with its branches (`Brancher.batch`)."""
        groups, stats = self.side.take(iteration, self.cfg.train.staleness == "drop")
        if self.brancher is not None:
            played = [t for g in groups for t in g if t.trunk_group is None]
            collected = self.brancher.batch(played, renumber_branches(groups))
            collected.stats.update(stats)
            collected.fresh_version = iteration
            return collected
        first = [t for g in groups for t in g]
        stats.update(self.ctx.sanity(first))
        batch, first, failed, mixed = scored_usable(self.ctx, first, self.cfg.rollout.group_size)
        return Collected(batch, first, {**stats, **failed, "groups_not_one_task": float(mixed)},
                         fresh_version=iteration)

    def state_dict(self) -> dict[str, Any]:
        """Finished groups not yet trained and the seeds of groups still playing are kept (a resume plays those
        again first); the seed counter moves past every group claimed."""
        pending, next_seed, in_flight = self.side.pending()
        return {"next_seed": next_seed, "async_pending": [[t.to_dict() for t in g] for g in pending],
                "async_in_flight": in_flight}

    def eval_policy(self) -> Any:
        return self.side.policy  # one generate at a time

    def take_weights(self, model: Any, version: int) -> bool:
        """The rollout side swaps them in between turns."""
        from agentgym.train.async_rl import weight_snapshot

        if self.cfg.train.push_weights:
            self.side.policy.box.publish(weight_snapshot(model), version)
        return True

    def advance(self, iteration: int) -> None:
        self.side.advance(iteration)  # the staleness gate lets the workers one batch further

    def close(self) -> None:
        self.side.stop()


def renumber_branches(units: list[list[Trajectory]]) -> list[Trajectory]:
    """The units' branches with group ids after every play's (in order), unique in the batch: each worker
    numbered its chunk's branch groups after the chunk's seeds, which other chunks' plays may hold."""
    next_id = max((t.group_id for unit in units for t in unit if t.trunk_group is None), default=-1) + 1
    out: list[Trajectory] = []
    for unit in units:
        ids: dict[int, int] = {}
        for t in unit:
            if t.trunk_group is not None:
                ids.setdefault(t.group_id, next_id + len(ids))
                out.append(dataclasses.replace(t, group_id=ids[t.group_id]))
        next_id += len(ids)
    return out


ASYNC_ONLY = ("max_staleness", "staleness", "batch_order", "rollout_workers", "groups_per_rollout")
"""The train section's options only the async collector reads."""


def refuse_async_options(train: Any) -> None:
    """train.mode=sync: an async-only option set away from its default would be ignored, so it is refused
    (issue 51, defect 5)."""
    defaults = {f.name: f.default for f in dataclasses.fields(train)}
    for name in ASYNC_ONLY:
        value = getattr(train, name)
        refuse_unless(value == defaults[name], f"train.{name}={value} only applies to train.mode=async (the sync loop "
                                                f"would ignore it): set train.mode=async, or drop train.{name}")


def check_async(cfg: Any, updater: str) -> None:
    """What train.mode=async cannot serve, refused with its fix."""
    t, m, a = cfg.train, cfg.model, cfg.algorithm
    fix = "or set train.mode=sync"
    refuse_unless(t.distributed == "none", f"train.mode=async trains in one process: set train.distributed=none {fix}")
    refuse_unless(updater == "token_ppo", f"train.mode=async runs the token PPO updater, not "
                  f"{updater}: use rollout.action_mode=generate and an estimator other than archer {fix}")
    refuse_unless(not a.dynamic_sampling, f"train.mode=async takes finished groups as they come: set "
                                          f"algorithm.dynamic_sampling=false {fix}")
    refuse_unless(a.loss.tis_cap is not None, "train.mode=async trains with decoupled PPO, whose behaviour weight is capped "
                                              f"by algorithm.loss.tis_cap: set it (e.g. 2.0) {fix}")
    refuse_unless(t.groups_per_rollout <= cfg.rollout.groups,
                  f"train.groups_per_rollout must be <= rollout.groups ({cfg.rollout.groups}), got {t.groups_per_rollout}")
    if m.policy.startswith("vllm:"):
        refuse_unless(cfg.rollout.sleep_level == 0, "train.mode=async keeps the vLLM engine generating while the trainer "
                                                    f"updates: set rollout.sleep_level=0 {fix}")
        refuse_unless(not m.lora.enabled, f"train.mode=async pushes full weights to the vLLM engine: set "
                                          f"model.lora.enabled=false {fix}")
