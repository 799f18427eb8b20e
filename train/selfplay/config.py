"""The `selfplay:` section of the training config and the combinations it cannot run with."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError

LEARNER_SEATS = ("all", "alternate")
SAMPLING = ("uniform", "latest")
REWARDS = ("game", "zero_sum")


@dataclass(frozen=True)
class SelfPlaySection:
    enabled: bool = False
    """Play the env's seats (a multi-agent env: TextArena with rollout.env_kwargs {opponent: seats})."""
    learner_seats: str = "all"
    """"all": the learner fills every seat (pure self-play); "alternate": one seat, seat (group + iteration) mod
    the seat count, the others drawn from the pool. Every group of a seat role is baselined within that role."""
    rewards: str = "game"
    """"game": each seat's own reward as the env pays it (general-sum); "zero_sum": each seat's reward minus the
    other seats' mean, halved."""
    pool: tuple[str, ...] = ("random", "start")
    """The opponent pool a fresh run starts with: "random", "start" (the weights training starts from, frozen),
    or any policy spec (checkpoint:DIR, openai:URL#MODEL, scripted:FILE:FUNC); snapshots join it."""
    snapshot_every: int = 0
    """A frozen snapshot of the learner joins the pool every K iterations (0: never)."""
    max_snapshots: int = 8
    """Snapshots kept in the pool; the oldest leaves when another joins (its file stays)."""
    sampling: str = "uniform"
    """How a group's opponent is drawn: "uniform" over the pool; "latest": the newest snapshot with probability
    latest_share (else uniform over the rest; uniform while there is no snapshot)."""
    latest_share: float = 0.5
    eval_every: int = 0
    """Score the learner against every pool member every N iterations and at the end (0: never), into
    run_dir/league_eval.jsonl."""
    eval_games: int = 8
    """Games per opponent and seat order in a league eval."""
    eval_temperature: float = 1.0
    """Sampling temperature of a league eval (greedy two-player games repeat one game)."""
    eval_seed_start: int = 1_000_000

    def __post_init__(self) -> None:
        _check(self.learner_seats in LEARNER_SEATS, f"selfplay.learner_seats must be one of {', '.join(LEARNER_SEATS)}, "
                                                    f"got {self.learner_seats!r}")
        _check(self.rewards in REWARDS, f"selfplay.rewards must be one of {', '.join(REWARDS)}, got {self.rewards!r}")
        _check(self.sampling in SAMPLING, f"selfplay.sampling must be one of {', '.join(SAMPLING)}, got {self.sampling!r}")
        _check(0.0 <= self.latest_share <= 1.0, f"selfplay.latest_share must be in [0, 1], got {self.latest_share}")
        _check(self.snapshot_every >= 0 and self.eval_every >= 0,
               "selfplay.snapshot_every and selfplay.eval_every must be >= 0 (0: never)")
        _check(self.max_snapshots >= 1 and self.eval_games >= 1,
               "selfplay.max_snapshots and selfplay.eval_games must be >= 1")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def check_selfplay(cfg: Any) -> None:
    """What selfplay.enabled cannot run with, each refused with its fix; a disabled section must not be half-set."""
    s, r, t = cfg.selfplay, cfg.rollout, cfg.train
    if not s.enabled:
        return
    fix = "or set selfplay.enabled=false"
    _check(s.learner_seats == "all" or s.pool or s.snapshot_every,
           f"selfplay.learner_seats=alternate draws opponents from the pool: give selfplay.pool (e.g. [random, start]) "
           f"or selfplay.snapshot_every, {fix}")
    _check(t.mode == "sync" and t.distributed == "none", f"self-play collects in one synchronous process: set "
                                                          f"train.mode=sync and train.distributed=none, {fix}")
    _check(r.layout in ("trajectory", "step") and not r.async_mode,
           f"multi-agent episodes run with rollout.layout=trajectory or step and rollout.async_mode=false, {fix}")
    _check(not r.lookahead and not r.group_rewards and not cfg.algorithm.dynamic_sampling,
           f"self-play plays each group once: set rollout.lookahead=0, rollout.group_rewards=[] and "
           f"algorithm.dynamic_sampling=false, {fix}")
    _check(cfg.model.policy.split(":", 1)[0] in ("hf", "checkpoint", "tiny"),
           f"self-play plays frozen snapshots by swapping their weights into the trained HF model: set "
           f"model.policy=hf:MODEL, checkpoint:DIR or tiny:NAME, {fix}")
    _check(not cfg.eval.every, f"the trainer's eval plays one policy in a single-agent rollout: set eval.every=0 and "
                               f"score self-play with selfplay.eval_every (the league eval), {fix}")
    from agentgym.engine.multiagent import seat_count

    seat_count(r.env, dict(r.env_kwargs))  # an env that does not say whose turn it is: refused here, with the fix
