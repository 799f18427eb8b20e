"""rollout.lookahead: rollout.groups tasks played once greedily, then rollout.lookahead alternatives at each
failed play's chosen turns (agentgym/engine/lookahead.py); the learner trains the looked-ahead turns' choices.
An episode an infrastructure failure ended (outcome "error") trains nothing, as in every collector
(`drop_failed`): a failed trunk leaves the batch, a failed play-out leaves its decision, and a decision left
with no alternative is dropped (a decision is the lookahead's group)."""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Sequence

from agentgym.train.collectors.base import refuse_unless, Collected, Collector, drop_failed, turn_cap


class LookaheadCollector(Collector):
    name = "lookahead"

    def collect(self, iteration: int) -> Collected:
        """batch: the greedy plays and every play-out; first: the greedy plays; stats: their reward sanity."""
        from agentgym.engine.lookahead import lookahead_rollout

        ctx, r = self.ctx, self.cfg.rollout
        seeds = list(range(self.next_seed, self.next_seed + r.groups))
        self.next_seed += r.groups
        greedy = ctx.rollout_config(turn_cap(self.cfg, iteration), 0.0, self.cfg.train.seed)
        got = lookahead_rollout(ctx.env_id, ctx.policy(), ctx.chat, seeds, alternatives=r.lookahead,
                                points=r.lookahead_points, success_points=r.lookahead_success_points, config=greedy,
                                rng=random.Random(self.cfg.train.seed * 1_000_003 + iteration),
                                env_kwargs=dict(r.env_kwargs) or None, start_group_id=seeds[0],
                                reset_options={"split": "train"})
        trunks, decisions, failed = drop_failed_plays(got.trunks, got.decisions)
        plays = [p for d in decisions for p in d.plays[1:]]
        return Collected(trunks + plays, got.trunks, {**ctx.sanity(got.trunks), **failed}, decisions)


def drop_failed_plays(trunks: Sequence[Any], decisions: Sequence[Any]) -> tuple[list[Any], list[Any], dict[str, float]]:
    """The trunks and decisions (agentgym.engine.lookahead.Decision) without the episodes an infrastructure failure
    ended: (trunks kept, decisions kept, counts as drop_failed's: failed trunks and play-outs; decisions dropped)."""
    kept_trunks, trunk_counts = drop_failed(trunks, 1)
    kept, failed_plays, dropped = [], 0, 0
    for d in decisions:
        ok = [m for m in range(1, len(d.plays)) if d.plays[m].outcome != "error"]
        failed_plays += len(d.plays) - 1 - len(ok)
        if d.trunk.outcome == "error" or not ok:  # nothing left to compare the greedy action with
            dropped += 1
            continue
        kept.append(replace(d, picks=(d.picks[0], *(d.picks[m] for m in ok)),
                            plays=(d.plays[0], *(d.plays[m] for m in ok))))
    return kept_trunks, kept, {"failed_dropped": trunk_counts["failed_dropped"] + failed_plays,
                               "groups_dropped_after_failures": float(dropped)}


def check_lookahead(cfg: Any) -> None:
    """What rollout.lookahead > 0 cannot run with, each refused with its fix."""
    r, t = cfg.rollout, cfg.train
    fix = "or set rollout.lookahead=0"
    refuse_unless(r.action_mode == "admissible", "rollout.lookahead tries other admissible actions: set "
                                                 f"rollout.action_mode=admissible, {fix}")
    g = cfg.algorithm.gigpo
    refuse_unless(cfg.algorithm.estimator == "gigpo" and g.step_weight == 1.0 and g.similarity is None,
                  "rollout.lookahead's advantages are GiGPO's step advantages alone, on the exact step group each "
                  "looked-ahead turn is: set algorithm.estimator=gigpo, algorithm.gigpo.step_weight=1 and "
                  f"algorithm.gigpo.similarity=null, {fix}")
    refuse_unless(r.group_size == 1, "rollout.lookahead plays each task once greedily (its groups are a turn's play-outs): "
                                     f"set rollout.group_size=1, {fix}")
    refuse_unless(t.mode == "sync" and t.distributed == "none",
                  f"rollout.lookahead runs in one synchronous process: set train.mode=sync and train.distributed=none, {fix}")
    refuse_unless(not cfg.algorithm.dynamic_sampling, f"rollout.lookahead has no sampled groups to refill: set "
                                                      f"algorithm.dynamic_sampling=false, {fix}")
    refuse_unless(not r.group_rewards, f"rollout.lookahead's play-outs are not a task's G rollouts: set "
                                       f"rollout.group_rewards=[], {fix}")
    refuse_unless(not cfg.algorithm.regularisers.expert_coef, "rollout.lookahead's update does not replay demonstrations: "
                                                             f"set algorithm.regularisers.expert_coef=0, {fix}")
    refuse_unless(r.layout != "fold" and r.executor in ("serial", "thread"),
                  "rollout.lookahead restores env snapshots in-process and replays trajectory or step prompts: set "
                  f"rollout.executor=serial or thread and rollout.layout=trajectory or step, {fix}")
