"""What an env's episodes need from the context: its horizon and the rollout settings that fit it.

An env registers a `ContextDefaults` (`agentgym.register(..., context=ContextDefaults(horizon=60, layout="fold",
max_observation_tokens=1024))`); `agentgym eval` and `agentgym train` use those settings wherever the user
did not set one, and print what they chose (`describe`). An env that registers none gets the engine's
defaults (`RolloutConfig`) and its turn limit as horizon.

Turn limits come from the gold path: `benchmarks/horizons.py --write` measures how many turns the oracle (or
the benchmark's gold path) takes on each built-in id and stores the lengths in `gold_paths.json`; a family
registers `max_turns=turn_limit(ENV_ID)`, the longest measured path plus the margin (`limit_for`), or a larger
budget it names the reason for (ALFWorld's 50 turns). `limit_source(ENV_ID)` says where an id's number came from.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentgym.errors import RegistrationError

# the rollout settings an env may recommend (names of RolloutConfig fields)
CONTEXT_FIELDS = ("layout", "history_turns", "max_context_tokens", "max_observation_tokens", "fold_at_tokens")
_LAYOUTS = ("trajectory", "step", "fold")  # agentgym.engine.rollout.LAYOUTS (not imported: rollout imports the pool)


@dataclass(frozen=True)
class ContextDefaults:
    """An env's horizon and the rollout settings its long episodes fit in; None = the engine's default."""

    horizon: int | None = None
    """Turns a long episode takes (the longest gold path, with room); None = the registered turn limit."""
    layout: str | None = None
    """"trajectory", "step" (a history window) or "fold" (older turns folded into a summary)."""
    history_turns: int | None = None
    """Step layout: past turns kept in each prompt."""
    max_context_tokens: int | None = None
    """The context an episode of `horizon` turns fits in."""
    max_observation_tokens: int | None = None
    """The observation budget: longer observations are truncated to it (check_env warns when a first or a
    typical observation passes it)."""
    fold_at_tokens: int | None = None
    """Fold layout: fold once a prompt would pass this."""

    def __post_init__(self) -> None:
        if self.layout is not None and self.layout not in _LAYOUTS:
            raise RegistrationError(f"ContextDefaults.layout must be one of {', '.join(_LAYOUTS)}, got {self.layout!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "layout" and value is not None and (not isinstance(value, int) or value < 0):
                raise RegistrationError(f"ContextDefaults.{f.name} must be an int >= 0 or None, got {value!r}")

    def settings(self) -> dict[str, Any]:
        """The rollout settings this env recommends (only those it sets)."""
        return {name: getattr(self, name) for name in CONTEXT_FIELDS if getattr(self, name) is not None}


def context_defaults(env_id: str) -> ContextDefaults:
    """What `env_id` registered (its turn limit as horizon where it names none); ContextDefaults() for an id
    this registry does not know (a remote env, a factory)."""
    from agentgym.registration import registered_context

    declared = registered_context(env_id) or ContextDefaults()
    if declared.horizon is not None:
        return declared
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    limit = getattr(spec, "max_episode_steps", None)
    return ContextDefaults(**{**{f.name: getattr(declared, f.name) for f in fields(declared)}, "horizon": limit})


def choose(env_id: str, given: dict[str, Any], engine_defaults: dict[str, Any]) -> dict[str, Any]:
    """The rollout settings to run `env_id` with: `given` (what the user set: name -> value) wins, then the
    env's recommendation, then `engine_defaults`."""
    recommended = context_defaults(env_id).settings()
    return {name: given[name] if name in given else recommended.get(name, engine_defaults.get(name))
            for name in CONTEXT_FIELDS}


def describe(env_id: str, chosen: dict[str, Any], given: dict[str, Any] | tuple[str, ...] = ()) -> str:
    """The settings chosen for `env_id` and where each came from: (you), (env) = its registration, (default)."""
    from_env = context_defaults(env_id).settings()
    parts = []
    for name in CONTEXT_FIELDS:
        if name not in chosen or (name == "history_turns" and chosen.get("layout") != "step") \
                or (name == "fold_at_tokens" and chosen.get("layout") != "fold"):
            continue
        source = "you" if name in given else "env" if name in from_env else "default"
        value = "auto" if name == "fold_at_tokens" and chosen[name] is None else chosen[name]
        parts.append(f"{name}={value} ({source})")
    return ", ".join(parts)


def context_lines(chosen: dict[str, dict[str, Any]], given: dict[str, Any] | tuple[str, ...] = ()) -> list[str]:
    """What `agentgym eval` / `train` print: one line per distinct choice over the envs of `chosen` (env id
    -> settings), naming the envs (or how many) and their horizons."""
    groups: dict[str, list[str]] = {}
    for env_id, settings in chosen.items():
        groups.setdefault(describe(env_id, settings, given), []).append(env_id)
    lines = []
    for text, ids in groups.items():
        horizons = sorted({h for h in (context_defaults(i).horizon for i in ids) if h})
        span = "" if not horizons else f"horizon {horizons[0]}" + (f"-{horizons[-1]}" if len(horizons) > 1 else "")
        who = ids[0] if len(ids) == 1 else f"{len(ids)} envs ({ids[0]}, ...)"
        lines.append(f"context for {who}{' (' + span + ' turns)' if span else ''}: {text}")
    return lines


# ----------------------------------------------------------------------------------------------- turn limits

GOLD_PATHS_FILE = Path(__file__).with_name("gold_paths.json")
MARGIN = 0.5     # room for an agent's detours: half the longest gold path again ...
MIN_SLACK = 2    # ... and at least two turns (a one-turn task gets three)
_SOURCES: dict[str, str] = {}  # env id -> where its turn limit came from (filled by turn_limit)
_RANDOM_OUTCOME: dict[str, str] = {}  # env id -> why even its oracle can fail (declare_random_outcome)


@dataclass(frozen=True)
class GoldPaths:
    """How many turns the gold path (or the oracle) took on an id's measured episodes."""

    episodes: int
    shortest: int
    median: float
    longest: int
    measured: str  # what was played: seeds / variations and how

    def describe(self) -> str:
        return (f"gold path {self.shortest}-{self.longest} turns (median {self.median:g}) over {self.episodes} "
                f"{self.measured}")


def limit_for(longest: int) -> int:
    """The turn limit for a task whose longest gold path is `longest` turns: that path plus MARGIN of it,
    at least MIN_SLACK turns more."""
    if longest < 1:
        raise ValueError(f"a gold path takes at least one turn, got {longest}")
    return longest + max(MIN_SLACK, math.ceil(MARGIN * longest))


@lru_cache(maxsize=1)
def _table() -> dict[str, GoldPaths]:
    data = json.loads(GOLD_PATHS_FILE.read_text())
    return {env_id: GoldPaths(**row) for env_id, row in data["ids"].items()}


def gold_paths(env_id: str) -> GoldPaths | None:
    """The measured gold-path lengths of a built-in id (gold_paths.json), or None where none were measured."""
    return _table().get(env_id)


def turn_limit(env_id: str, budget: int | None = None, why: str = "") -> int:
    """The turn limit to register `env_id` with: `limit_for` its longest measured gold path, or `budget` where
    that is larger (`why` says whose budget it is); an id with no measured gold path needs a budget and a why.
    Records the reasoning for `limit_source`."""
    measured = gold_paths(env_id)
    if budget is not None and (budget < 1 or not why):
        raise RegistrationError(f"turn_limit({env_id!r}, budget={budget!r}): a budget is an int >= 1 with a why")
    if measured is None:
        if budget is None:
            raise RegistrationError(f"{env_id!r} has no measured gold path in {GOLD_PATHS_FILE.name}: measure it "
                                    f"(python benchmarks/horizons.py --write --env {env_id}) or pass budget= and why=")
        _SOURCES[env_id] = f"{budget}: {why} (no gold path measured)"
        return budget
    derived = limit_for(measured.longest)
    rule = f"{measured.longest} + max({MIN_SLACK}, {MARGIN:g} x {measured.longest}) = {derived}"
    if budget is not None and budget > derived:
        _SOURCES[env_id] = f"{budget}: {why}; above the gold-path limit {rule} ({measured.describe()})"
        return budget
    below = f"; the budget {budget} ({why}) is below it" if budget is not None and budget < derived else ""
    _SOURCES[env_id] = f"{derived}: {rule} ({measured.describe()}){below}"
    return derived


def limit_source(env_id: str) -> str:
    """Where `env_id`'s registered turn limit came from, or "" for an id not registered through turn_limit."""
    from agentgym.registration import discover

    discover()
    return _SOURCES.get(env_id, "")


def declare_random_outcome(env_id: str, why: str) -> None:
    """Mark `env_id` as a task whose outcome the env's randomness decides, so even its oracle fails some
    episodes (`why`: how, and the success the oracle reaches); `agentgym check --oracle` then counts its
    unsolved episodes as misses, not failures. Every other id's oracle must solve every episode."""
    if not why:
        raise RegistrationError(f"declare_random_outcome({env_id!r}): say why the outcome is random")
    _RANDOM_OUTCOME[env_id] = why


def random_outcome(env_id: str) -> str:
    """Why `env_id`'s oracle can fail (its declared random outcome), or "" for a task it always solves."""
    from agentgym.registration import discover

    discover()
    return _RANDOM_OUTCOME.get(env_id, "")
