"""The checks of one reset or step of an env (`check_env`'s pieces, agentgym/checker.py): its API, Gymnasium's
checker pieces that apply to text spaces, the observation, the info keys and anchor, the reward and its
components; and `guard`, which turns an exception of the env's code into a CheckError naming the check
(a missing optional dependency stays a MissingDependencyError: `check_all` reports it as skipped).
"""
from __future__ import annotations

import functools
import json
import math
import warnings
from typing import Any, Callable

import gymnasium as gym

from agentgym.errors import CheckError, MissingDependencyError


def short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def difference(a: Any, b: Any, context: int = 60) -> str:
    """`a vs b`, shortened; two long strings are shown around their first differing character, since two
    observations that share a long opening look the same in `short`."""
    if not (isinstance(a, str) and isinstance(b, str)) or max(len(a), len(b)) <= context * 2:
        return f"{short(a)} vs {short(b)}"
    from agentgym.chat import first_mismatch

    at = first_mismatch(a, b) or 0
    start = max(0, at - context)
    return (f"{len(a)} vs {len(b)} chars, first different at char {at}: ...{a[start:at + context]!r} vs "
            f"...{b[start:at + context]!r}")


def as_missing_dependency(exc: BaseException) -> MissingDependencyError | None:
    """The missing optional dependency behind an import failure, or None if it is a bug.

    `require()` raises MissingDependencyError; a plain `import textworld` at the top of an env module
    raises ModuleNotFoundError, which counts too unless the missing module is agentgym's own.
    """
    if isinstance(exc, MissingDependencyError):
        return exc
    if isinstance(exc, ModuleNotFoundError) and exc.name and not exc.name.startswith("agentgym"):
        return MissingDependencyError(f"needs the module {exc.name!r}, which is not installed")
    return None


def gymnasium_failure(name: str, exc: Exception) -> Exception:
    """What a failing Gymnasium check becomes: the missing dependency it reveals, else a CheckError naming it."""
    missing = as_missing_dependency(exc)
    return missing if missing is not None else CheckError(f"[gymnasium] {name}: {type(exc).__name__}: {exc}")


def guard(check: str, fn: Callable[[], Any]) -> Any:
    """Run env code; any exception but a missing dependency becomes a CheckError naming the check."""
    try:
        return fn()
    except CheckError:
        raise
    except Exception as exc:
        missing = as_missing_dependency(exc)
        if missing is exc:
            raise
        if missing is not None:
            raise missing from exc
        raise CheckError(f"[{check}] raised {type(exc).__name__}: {exc}") from exc


# ----------------------------------------------------------------------------------------------- pieces

def check_api(env: gym.Env) -> None:
    """[api] The env's type, instructions, tools and spaces."""
    if not isinstance(env, gym.Env):
        raise CheckError(f"[api] expected a gymnasium.Env, got {type(env).__name__}; subclass agentgym.TextEnv")
    base = env.unwrapped
    instructions = guard("api", lambda: getattr(base, "instructions", ""))
    if not isinstance(instructions, str):
        raise CheckError(f"[api] `instructions` must be a str, got {type(instructions).__name__}")
    tools = guard("api", lambda: getattr(base, "tools", []))
    if not isinstance(tools, (list, tuple)):
        raise CheckError(f"[api] `tools` must be a list of agentgym.Tool, got {type(tools).__name__}")
    for tool_ in tools:
        try:
            json.dumps(tool_.schema)
        except (AttributeError, TypeError, ValueError) as exc:
            raise CheckError(f"[api] tool {tool_!r} has no JSON-serialisable `schema` ({exc}); "
                             "build tools with @agentgym.tool") from exc
    for name in ("action_space", "observation_space"):
        space = getattr(env, name, None)
        samples = ("", "héllo {\"json\": [1]}\n<tool_call>", "🤖" * 3)
        if space is None or not all(guard("api", functools.partial(space.contains, s)) for s in samples):
            raise CheckError(f"[api] {name} {space!r} must admit any UTF-8 text; use agentgym.Text()")


def check_gymnasium(env: gym.Env, seed: int = 0) -> tuple[str, ...]:
    """[gymnasium] Gymnasium's env-checker pieces that apply to text spaces; returns its warnings.

    The env is reset with `seed` first, so the unseeded resets these pieces make continue a seeded
    stream: the same tasks every run (envs that build tasks slowly, like TextWorld, cache them).
    """
    from gymnasium.utils import env_checker as ec

    base = env.unwrapped
    guard("gymnasium", lambda: base.reset(seed=seed))
    pieces = (
        ("reset return type", lambda: ec.check_reset_return_type(base)),
        ("reset seed determinism", lambda: ec.check_reset_seed_determinism(base)),
        ("reset options", lambda: ec.check_reset_options(base)),
        ("reset passive checker", lambda: ec.env_reset_passive_checker(base)),
        ("step passive checker", lambda: ec.env_step_passive_checker(base, base.action_space.sample())),
        ("step determinism", lambda: ec.check_step_determinism(base)),
        ("returned data not reused", lambda: ec.check_returned_data_not_reused(base)),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, piece in pieces:
            try:
                piece()
            except MissingDependencyError:
                raise
            except Exception as exc:
                raise gymnasium_failure(name, exc) from exc
    return tuple(dict.fromkeys(str(w.message) for w in caught))


def check_info(info: Any, where: str, step: bool = True) -> None:
    """[info] and [anchor]: the standard info keys have the right types (step infos must have them all)."""
    if not isinstance(info, dict):
        raise CheckError(f"[info] {where}: info must be a dict, got {type(info).__name__}")
    for key in ("success", "valid_action"):
        if step and key not in info:
            raise CheckError(f"[info] {where}: info has no {key!r}; build infos with agentgym.make_info")
        if key in info and not isinstance(info[key], bool):
            raise CheckError(f"[info] {where}: info[{key!r}] must be a bool, got {short(info[key])}")
    components = info.get("reward_components", {})
    if not isinstance(components, dict) or not all(
            isinstance(k, str) and _is_number(v) for k, v in components.items()):
        raise CheckError(f"[info] {where}: info['reward_components'] must map str to float, got "
                         f"{short(components)}")
    admissible = info.get("admissible_actions", [])
    if not isinstance(admissible, (list, tuple)) or not all(isinstance(a, str) for a in admissible):
        raise CheckError(f"[info] {where}: info['admissible_actions'] must be a list of str, got {short(admissible)}")
    if "task_id" in info and not isinstance(info["task_id"], str):
        raise CheckError(f"[info] {where}: info['task_id'] must be a str, got {short(info['task_id'])}")
    if "tool_results" in info and not isinstance(info["tool_results"], (list, tuple)):
        raise CheckError(f"[info] {where}: info['tool_results'] must be a list, got {short(info['tool_results'])}")
    try:
        hash(info.get("anchor"))
    except TypeError as exc:
        raise CheckError(f"[anchor] {where}: info['anchor'] must be hashable (GiGPO groups on it), got "
                         f"{short(info.get('anchor'))}; use a str or a tuple") from exc


def _is_number(value: Any) -> bool:
    try:
        return not isinstance(value, (bool, str)) and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def check_observation(env: gym.Env, obs: Any, where: str) -> None:
    """[observation] A str that the observation space admits."""
    if not isinstance(obs, str):
        raise CheckError(f"[observation] {where}: observations must be str, got {type(obs).__name__}")
    if not env.observation_space.contains(obs):
        raise CheckError(f"[observation] {where}: the observation is outside {env.observation_space!r} "
                         f"(too long, or not valid UTF-8, e.g. an echoed lone surrogate): {short(obs)}")


def check_step_result(env: gym.Env, result: Any, where: str) -> tuple:
    """[observation], [info], [anchor], [reward] on one step's 5-tuple; returns it."""
    if not isinstance(result, tuple) or len(result) != 5:
        raise CheckError(f"[api] {where}: step must return (obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = result
    check_observation(env, obs, where)
    check_info(info, where)
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        raise CheckError(f"[api] {where}: terminated and truncated must be bool, got "
                         f"{type(terminated).__name__} and {type(truncated).__name__}")
    if not _is_number(reward):
        raise CheckError(f"[reward] {where}: the reward must be a finite number, got {short(reward)}")
    total = sum(float(v) for v in info.get("reward_components", {}).values())
    if abs(float(reward) - total) > 1e-6:
        raise CheckError(f"[reward] {where}: reward {reward!r} != sum of reward_components {total!r} "
                         f"({short(info.get('reward_components'))}); name every part of the reward")
    return result
