"""Is every task solvable as registered? Play an env's oracle at the eval's defaults on fresh seeds.

`play_oracle(env_id, seeds)` plays `OraclePolicy` through the rollout engine with exactly what `agentgym eval
--env ENV_ID` would use (the registered turn limit, the env's context defaults) and reports, per episode, how
it ended. An episode that ends `max_turns` (the limit is shorter than the oracle's path), `context_full` (the
context defaults do not fit it) or without an oracle action (a task type the oracle cannot play) is a problem;
an oracle that plays to the end and fails is a miss, counted apart (the simulator's randomness can decide a task,
ScienceWorld's genetics experiments). Seeds are drawn fresh each run (`fresh_seeds`) so the check meets tasks no
test fixed, and printed so a failure can be played again (`agentgym check --oracle ENV --seeds SEED`).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, replace

from agentgym.errors import MissingDependencyError

PROBLEMS = ("max_turns", "context_full", "no_action")


@dataclass(frozen=True)
class OracleEpisode:
    env_id: str
    seed: int
    success: bool
    end_reason: str   # the rollout's, or "no_action" when the oracle had nothing to play
    turns: int        # env steps (a fold summary turn is not one)
    limit: int | None
    error: str = ""

    @property
    def problem(self) -> bool:
        """The harness, not the task, stopped the oracle: a limit it did not fit, or no oracle action."""
        return self.end_reason in PROBLEMS or (self.end_reason == "failed" and not self.success)

    def describe(self) -> str:
        what = "solved" if self.success else self.end_reason
        if self.end_reason == "no_action":
            what = f"no oracle action at turn {self.turns}"
        elif self.end_reason == "max_turns":
            what = f"max_turns at {self.turns} turns (limit {self.limit})"
        elif self.end_reason == "context_full":
            what = f"context_full after {self.turns} turns"
        elif self.end_reason == "failed":
            what = f"failed at turn {self.turns}: {self.error[:200]}"
        elif not self.success:
            what = f"not solved ({self.end_reason} after {self.turns} turns)"
        return f"seed {self.seed}: {what}"


def fresh_seeds(count: int) -> list[int]:
    """`count` distinct seeds from the OS's randomness: none of a suite's or a test's fixed ones, by design."""
    seeds: set[int] = set()
    while len(seeds) < count:
        seeds.add(10_000 + secrets.randbelow(2**31 - 10_000))
    return sorted(seeds)


def has_oracle(env_id: str) -> bool:
    """Whether the env class of `env_id` has an oracle of its own (not TextEnv's "no oracle" default)."""
    import agentgym
    from agentgym.core import TextEnv
    from gymnasium.envs.registration import load_env_creator

    entry = agentgym.spec(env_id).entry_point
    if entry is None:
        return False
    creator = entry if callable(entry) else load_env_creator(entry)
    oracle = getattr(creator, "oracle_action", None)
    return oracle is not None and oracle is not TextEnv.oracle_action


def env_steps(traj) -> int:
    """The turns that stepped the env: the fold layout's summary turns do not count against the turn limit."""
    from agentgym.engine.layouts import is_summary

    return sum(not is_summary(turn) for turn in traj.turns)


def play_oracle(env_id: str, seeds: list[int], kwargs: dict | None = None, split: str | None = None) -> list[OracleEpisode]:
    """Play the oracle on `seeds` at the eval's defaults for `env_id` (the entry's `kwargs`; the eval's split
    unless `split` names another), one episode (one env) at a time."""
    from agentgym.eval.records import EvalConfig
    from agentgym.policy import SamplingParams, load_policy
    from agentgym.registration import SuiteEntry
    from agentgym.engine.rollout import RolloutConfig, rollout

    import agentgym

    entry = SuiteEntry(env_id, dict(kwargs or {}))
    eval_config = EvalConfig(policy="oracle", entries=(entry,), out_dir="-")
    if split:
        eval_config = replace(eval_config, split=split)
    sampling = SamplingParams(temperature=eval_config.sampling_temperature, max_tokens=eval_config.max_tokens,
                              seed=eval_config.seed)
    config = RolloutConfig(max_turns=eval_config.max_turns, **eval_config.context_settings(env_id),
                           sampling=sampling, executor="serial")
    limit = eval_config.max_turns or agentgym.spec(env_id).max_episode_steps
    episodes = []
    for seed in seeds:  # one at a time: a pool of N envs would start N simulators (ScienceWorld: N JVMs)
        [traj] = rollout(env_id, load_policy("oracle"), None, seeds=[seed], config=config, env_kwargs=entry.kwargs,
                         reset_options={"split": eval_config.split})
        error = str(traj.error or "")
        if "MissingDependency" in error or "not installed" in error:
            raise MissingDependencyError(f"{env_id}: {error}")
        reason = traj.end_reason
        if reason == "failed" and ("has no action for this state" in error or "no oracle_action" in error):
            reason = "no_action"
        episodes.append(OracleEpisode(env_id, seed, bool(traj.success), reason, env_steps(traj), limit, error))
    return episodes
