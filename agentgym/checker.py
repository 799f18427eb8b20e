"""`check_env`: does an env keep the text-env contract?

Gymnasium's own checks run where they apply to text spaces (reset/step signatures and types, seeding,
options, data not reused). Then the text-env checks, each with a name that a failure quotes:

    api           a gymnasium.Env; `instructions` is text; `tools` are Tools with JSON schemas; the spaces
                  admit any UTF-8 text
    gymnasium     Gymnasium's env-checker pieces that work for Text spaces
    observation   every observation is a str inside the observation space (valid UTF-8, not too long)
    info          standard info keys with the right types (success/valid_action bool, components dict...)
    anchor        `info["anchor"]` is hashable, and set by some info of every episode
    reward        a finite float equal to the sum of `reward_components` (within 1e-6)
    determinism   the same seed and the same actions give the same observations, rewards and infos,
                  on a fresh instance and on a reused one
    any string    empty, 1 MB, control characters, unicode, lone surrogates, malformed tool calls ... are
                  accepted without an exception, flagged `valid_action=False` and answered with feedback
    oracle        where `oracle_action()` knows an action, following it is valid and solves the task
    turn limit    a registered `max_turns` ends the episode (`truncated`) on time
    snapshot      where snapshot()/restore() exist: a restored env (same or fresh instance) answers alike
    render        `render()` gives text (or None) after reset
    close         `close()` may be called twice
    context budget  warnings only: the env's episodes do not fit the context it registers (agentgym.engine.budget_check)

The first failure raises `CheckError("[check] what went wrong ...")`. A missing optional dependency
raises `MissingDependencyError`, which `check_all` reports as skipped. The pieces live by concern:
agentgym/step_checks.py (one reset or step: api, gymnasium, observation, info, anchor, reward) and
agentgym/episode_checks.py (what plays episodes: determinism, any string, oracle, turn limit, render, close);
the snapshot check is agentgym/snapshot.py's, the context budget agentgym/engine/budget_check.py's.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import gymnasium as gym

from agentgym.engine.budget_check import check_context_budget
from agentgym.episode_checks import (GARBAGE_ACTIONS, check_any_string, check_determinism,  # noqa: F401  (re-exported)
                                     check_oracle, check_render_and_close, check_same_seed_same_task,
                                     check_turn_limit, pick_action, snapshot_reset_options)
from agentgym.errors import CheckError, MissingDependencyError
from agentgym.snapshot import check_snapshot
from agentgym.step_checks import (as_missing_dependency, check_api, check_gymnasium,  # noqa: F401  (re-exported)
                                  check_info, check_observation, check_step_result, guard)


@dataclass(frozen=True)
class CheckReport:
    """What `check_env` ran: the checks that passed, the warnings Gymnasium raised on the way, and where the
    env's episodes do not fit its declared context budget."""

    env_id: str
    checks: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    budget_warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckOutcome:
    """One env's line in `check_all`: status is "ok", "failed" or "skipped"."""

    env_id: str
    status: str
    message: str = ""
    report: CheckReport | None = None


# ----------------------------------------------------------------------------------------------- entry points

def _resolve(env_or_id: Any, make_kwargs: dict[str, Any]) -> tuple[str, Callable[[], gym.Env] | None, gym.Env]:
    if isinstance(env_or_id, str):
        from agentgym.registration import make, spec

        spec(env_or_id)  # an unknown id raises RegistrationError with "did you mean"
        factory = lambda: make(env_or_id, **make_kwargs)  # noqa: E731
        return env_or_id, factory, guard("api", factory)
    if isinstance(env_or_id, gym.Env):
        env_spec = env_or_id.spec
        return (env_spec.id if env_spec else type(env_or_id.unwrapped).__name__), None, env_or_id
    if callable(env_or_id):
        env = guard("api", env_or_id)
        name = env.spec.id if getattr(env, "spec", None) else type(getattr(env, "unwrapped", env)).__name__
        return name, env_or_id, env
    raise CheckError(f"[api] check_env takes an env id, a gymnasium.Env or a zero-argument factory, "
                     f"got {type(env_or_id).__name__}")


def check_env(env_or_id: Any, *, seeds: Sequence[int] = (0, 1), max_steps: int = 12,
              garbage: Sequence[tuple[str, str]] = GARBAGE_ACTIONS, garbage_is_invalid: bool = True,
              oracle: bool = True, gymnasium_checks: bool = True, **make_kwargs: Any) -> CheckReport:
    """Check an env id, env instance or zero-argument env factory against the text-env contract.

    Raises `CheckError("[check] ...")` on the first failed check (the names are in this module's
    docstring). An instance passed in is closed at the end. `garbage_is_invalid=False` is for envs where
    any text is a meaningful action (free-form chat), so garbage need not be flagged invalid.
    """
    if not seeds:
        raise CheckError("[api] check_env needs at least one seed, e.g. seeds=(0, 1)")
    env_id, factory, env = _resolve(env_or_id, make_kwargs)
    passed: list[str] = []
    gym_warnings: tuple[str, ...] = ()
    budget: tuple[str, ...] = ()
    try:
        check_api(env)
        passed.append("api")
        if gymnasium_checks:
            gym_warnings = check_gymnasium(env, seeds[0])
            passed.append("gymnasium")
        check_determinism(env, factory, seeds, max_steps)
        passed += ["observation", "info", "anchor", "reward", "determinism"]
        check_any_string(env, seeds[0], garbage, garbage_is_invalid)
        passed.append("any string")
        if oracle and [check_oracle(env, seed) for seed in seeds][0]:
            passed.append("oracle")
        if check_turn_limit(env):
            passed.append("turn limit")
        pick = lambda e, info, rng=random.Random(seeds[0]): pick_action(e, info, rng)  # noqa: E731
        if guard("snapshot", lambda: check_snapshot(env, seeds[0], pick, factory=factory,
                                                     options=snapshot_reset_options(env))):
            passed.append("snapshot")
        budget = guard("context budget", lambda: check_context_budget(env, env_id, seeds[0], max_steps, pick))
        passed.append("context budget")
        check_render_and_close(env, factory)
        passed += ["render", "close"]
    finally:
        try:
            env.close()
        except Exception:  # the close check reports this; here we only tidy up after a failure
            pass
    return CheckReport(env_id, tuple(passed), gym_warnings, budget)


def check_all(env_ids: Sequence[str] | None = None, **kwargs: Any) -> list[CheckOutcome]:
    """Check every registered env (or the ids given); a missing optional dependency is a skip."""
    from agentgym.errors import AgentGymError
    from agentgym.registration import list_envs

    outcomes = []
    for env_id in env_ids if env_ids is not None else list_envs():
        try:
            report = check_env(env_id, **kwargs)
            outcomes.append(CheckOutcome(env_id, "ok", f"{len(report.checks)} checks passed", report))
        except MissingDependencyError as exc:
            outcomes.append(CheckOutcome(env_id, "skipped", str(exc)))
        except AgentGymError as exc:
            outcomes.append(CheckOutcome(env_id, "failed", str(exc)))
    return outcomes
