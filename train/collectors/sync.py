"""The synchronous collectors: play rollout.groups fresh tasks with the current weights (refilling dropped
groups under algorithm.dynamic_sampling); under train.distributed rank 0 plays and broadcasts to every rank."""
from __future__ import annotations

from typing import Any

from agentgym.train import distributed as D
from agentgym.train.collectors.base import Collected, Collector, drop_failed, keep_varied_groups, scored_usable, turn_cap
from agentgym.trajectory import Trajectory


class SyncCollector(Collector):
    name = "sync"

    def collect(self, iteration: int) -> Collected:
        batch, first, stats = self.play_batch(iteration)
        return Collected(batch, first, stats)

    def play_batch(self, iteration: int) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(training batch, the first round's rollouts for metrics, stats of what was dropped)."""
        ctx, r, a = self.ctx, self.cfg.rollout, self.cfg.algorithm
        config = ctx.rollout_config(turn_cap(self.cfg, iteration), r.temperature, self.cfg.train.seed)
        kept: list[list[Trajectory]] = []
        first: list[Trajectory] = []
        stats = {"failed_dropped": 0.0, "groups_dropped_after_failures": 0.0, "groups_not_one_task": 0.0}
        dropped, rounds = 0, 0
        while True:
            need = r.groups - len(kept)
            seeds = list(range(self.next_seed, self.next_seed + need))
            self.next_seed += need
            trajs = ctx.play(seeds, r.group_size, config, "train")
            if not first:  # the env's own rewards, before group rewards
                stats.update(ctx.sanity(trajs))
            trajs, played, failed, mixed = scored_usable(ctx, trajs, r.group_size)
            first = first or played
            stats = {k: stats[k] + failed.get(k, 0.0) for k in stats}
            stats["groups_not_one_task"] += mixed
            if not a.dynamic_sampling:
                return trajs, first, stats
            varied, n_dropped = keep_varied_groups(trajs, a)
            kept += varied
            dropped += n_dropped
            rounds += 1
            if len(kept) >= r.groups or rounds > a.max_refill_rounds:
                break
        batch = [t for g in kept[:r.groups] for t in g] or drop_failed(first, 1)[0]
        return batch, first, {**stats, "groups_kept": float(min(len(kept), r.groups)), "groups_dropped": float(dropped),
                              "refill_rounds": float(rounds - 1)}


class BroadcastCollector(SyncCollector):
    """train.distributed: rank 0 rolls out for all ranks; every rank gets the batch and the seed counter."""

    name = "broadcast"

    def collect(self, iteration: int) -> Collected:
        dist: Any = self.ctx.dist
        played = (*self.play_batch(iteration), self.next_seed) if self.ctx.is_main else None
        batch, first, stats, self.next_seed = D.broadcast(dist, played)
        return Collected(batch, first, stats)
