"""selfplay.enabled: every batch is matches on a multi-agent env (agentgym/engine/multiagent.py). The learner
fills every seat (learner_seats=all) or one seat, alternating by group (alternate), the other seats drawn from
the league (train/selfplay/league.py) once per group, so a group is group_size matches of one task against one
opponent. Only the learner's seats train: each seat's trajectory carries its own group id (task group x seats +
seat), so a seat's turns are baselined among the same seat role only; frozen opponents' turns never reach the
batch. Every selfplay.snapshot_every iterations the learner's weights join the league frozen; every
selfplay.eval_every iterations (and at the end) the learner plays every member (train/selfplay/evaluate.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym.engine.multiagent import Match, Seat, play_matches, seat_count
from agentgym.train.collectors.base import Collected, Collector, drop_failed, turn_cap
from agentgym.train.selfplay.league import League
from agentgym.trajectory import Trajectory


class SelfPlayCollector(Collector):
    name = "selfplay"

    def __init__(self, ctx: Any, state: dict[str, Any]):
        super().__init__(ctx, state)
        s, r = self.cfg.selfplay, self.cfg.rollout
        self.seats = seat_count(r.env, dict(r.env_kwargs))
        self.run_dir = Path(self.cfg.train.run_dir)
        kw = {"sampling": s.sampling, "latest_share": s.latest_share, "max_snapshots": s.max_snapshots}
        if state.get("league") is not None:  # a resume keeps the league it was saved with
            self.league = League.from_state(self.run_dir, state["league"], **kw)
        else:
            self.league = League.fresh(self.run_dir, tuple(s.pool), self._weights, seed=self.cfg.train.seed, **kw)

    def _weights(self) -> dict[str, Any]:
        from agentgym.train import merge

        return merge.trainable_weights(self.ctx.policy().model)

    def seating(self, group: int, iteration: int) -> list[int]:
        """The seats the learner fills in `group`'s matches."""
        if self.cfg.selfplay.learner_seats == "all":
            return list(range(self.seats))
        return [(group + iteration) % self.seats]

    def collect(self, iteration: int) -> Collected:
        ctx, r, s = self.ctx, self.cfg.rollout, self.cfg.selfplay
        config = ctx.rollout_config(turn_cap(self.cfg, iteration), r.temperature, self.cfg.train.seed)
        seeds = list(range(self.next_seed, self.next_seed + r.groups))
        self.next_seed += r.groups
        learner = ctx.policy()
        opponents: dict[str, Any] = {}  # one policy per league member this iteration: its requests batch together
        seatings, members = [], []
        for g, seed in enumerate(seeds):
            mine = self.seating(g, iteration)
            member = None if len(mine) == self.seats else self.league.sample()
            if member is not None and member.name not in opponents:
                opponents[member.name] = self.league.policy(member, learner, seed=seed)
            seatings.append([Seat(learner, ctx.chat, "learner") if seat in mine else
                             Seat(opponents[member.name], None, member.name)  # type: ignore[union-attr]
                             for seat in range(self.seats)])
            members.append((mine, "self" if member is None else member.name))
        played = play_matches(ctx.env_id, seatings, None, seeds, r.group_size, config, dict(r.env_kwargs) or None,
                              rewards=s.rewards, start_group_id=seeds[0], reset_options={"split": "train"})
        matches = [(match, *members[k // r.group_size]) for k, match in enumerate(played)]
        trained: list[Trajectory] = [match.seats[seat] for match, mine, _ in matches for seat in mine]
        stats = {**ctx.sanity(trained), **outcome_stats(matches)}
        # a later seat's first prompt holds the earlier seats' moves, so a group is one task (its seed) without
        # one first prompt: only failed matches leave (the sync collectors' one-first-prompt check does not apply)
        kept, failed = drop_failed(trained, min(2, r.group_size))
        stats.update(failed)
        return Collected(kept, trained, stats)

    def advance(self, iteration: int) -> None:
        s = self.cfg.selfplay
        if s.snapshot_every and iteration % s.snapshot_every == 0:
            self.league.add_snapshot(iteration, self._weights())
        if s.eval_every and (iteration % s.eval_every == 0 or iteration == self.cfg.train.iterations) and self.ctx.is_main:
            from agentgym.train.selfplay.evaluate import league_eval, write_league_eval

            config = self.ctx.rollout_config(turn_cap(self.cfg, iteration), s.eval_temperature, self.cfg.train.seed)
            write_league_eval(self.run_dir, league_eval(self.ctx, self.league, self.ctx.policy(), iteration, config))

    def state_dict(self) -> dict[str, Any]:
        return {"next_seed": self.next_seed, "league": self.league.state_dict()}


def outcome_stats(matches: list[tuple[Match, list[int], str]]) -> dict[str, float]:
    """The learner's win / draw / loss shares per opponent ("self" in pure self-play: seat 0's view) and per
    seat it sat in."""
    tallies: dict[str, list[str]] = {}
    for match, mine, opponent in matches:
        for seat in mine[:1]:
            outcome = match.outcome(seat)
            tallies.setdefault(f"vs_{opponent}", []).append(outcome)
            tallies.setdefault(f"seat_{seat}", []).append(outcome)
    stats: dict[str, float] = {}
    for key, outcomes in tallies.items():
        played = [o for o in outcomes if o in ("win", "draw", "loss")]
        for result in ("win", "draw", "loss"):
            stats[f"selfplay/{key}/{result}"] = played.count(result) / len(played) if played else 0.0
    return stats
