"""train.mode=async: rollout workers (train/async_rl.py) keep playing with the newest weights they have while
the trainer updates on finished groups. This module holds the collector and the async options' checks."""
from __future__ import annotations

from typing import Any

from agentgym.train.collectors.base import Collected, Collector, CollectorContext, turn_cap, usable
from agentgym.trajectory import Trajectory


class AsyncCollector(Collector):
    name = "async"

    def __init__(self, ctx: CollectorContext, state: dict[str, Any]):
        from agentgym.train.async_rl import AsyncRollouts, VersionedPolicy, WeightBox

        super().__init__(ctx, state)
        t = self.cfg.train
        pending = [[Trajectory.from_dict(t) for t in g] for g in state.get("async_pending") or ()]
        # a vLLM engine takes the published weights itself; the HF policy generates with its own copy of the
        # model, so the trainer can update while it plays
        inner = ctx.make_rollout_policy() if ctx.make_rollout_policy is not None else ctx.policy()
        self.side = AsyncRollouts(VersionedPolicy(inner, WeightBox(ctx.iteration)), self.play,
                                  groups=self.cfg.rollout.groups, group_size=self.cfg.rollout.group_size,
                                  chunk=t.groups_per_rollout, workers=t.rollout_workers,
                                  max_staleness=t.max_staleness, next_seed=self.next_seed, iteration=ctx.iteration,
                                  pending=pending, start_order=t.batch_order == "start")

    def play(self, seeds: list[int], policy: Any, version: int) -> list[Trajectory]:
        """One rollout worker's chunk: the groups of `seeds`, played as the sync trainer plays a batch."""
        r = self.cfg.rollout
        config = self.ctx.rollout_config(turn_cap(self.cfg, version), r.temperature, self.cfg.train.seed)
        return self.ctx.play(seeds, r.group_size, config, "train", policy)

    def collect(self, iteration: int) -> Collected:
        """rollout.groups finished groups off the queue (batch: after drops; first: before)."""
        groups, stats = self.side.take(iteration, self.cfg.train.staleness == "drop")
        first = [t for g in groups for t in g]
        stats.update(self.ctx.sanity(first))
        first = self.ctx.with_group_rewards(first)
        batch, failed, mixed = usable(first, self.cfg.rollout.group_size)
        return Collected(batch, first, {**stats, **failed, "groups_not_one_task": float(mixed)},
                         fresh_version=iteration)

    def state_dict(self) -> dict[str, Any]:
        """Finished groups not yet trained are kept; the seeds move past every group claimed."""
        pending, next_seed = self.side.pending()
        return {"next_seed": next_seed, "async_pending": [[t.to_dict() for t in g] for g in pending]}

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
