"""rollout.lookahead: rollout.groups tasks played once greedily, then rollout.lookahead alternatives at each
failed play's chosen turns (agentgym/lookahead.py); the learner trains the looked-ahead turns' choices."""
from __future__ import annotations

import random

from agentgym.train.collectors.base import Collected, Collector, turn_cap


class LookaheadCollector(Collector):
    name = "lookahead"

    def collect(self, iteration: int) -> Collected:
        """batch: the greedy plays and every play-out; first: the greedy plays; stats: their reward sanity."""
        from agentgym.lookahead import lookahead_rollout

        ctx, r = self.ctx, self.cfg.rollout
        seeds = list(range(self.next_seed, self.next_seed + r.groups))
        self.next_seed += r.groups
        greedy = ctx.rollout_config(turn_cap(self.cfg, iteration), 0.0, self.cfg.train.seed)
        got = lookahead_rollout(ctx.env_id, ctx.policy(), ctx.chat, seeds, alternatives=r.lookahead,
                                points=r.lookahead_points, success_points=r.lookahead_success_points, config=greedy,
                                rng=random.Random(self.cfg.train.seed * 1_000_003 + iteration),
                                env_kwargs=dict(r.env_kwargs) or None, start_group_id=seeds[0],
                                reset_options={"split": "train"})
        return Collected(got.trunks + got.branches, got.trunks, ctx.sanity(got.trunks), got.decisions)
