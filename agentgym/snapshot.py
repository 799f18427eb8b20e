"""Env snapshots: `snapshot() -> bytes` / `restore(bytes)`, the optional part of the text-env contract.

A snapshot holds everything a later `step` reads, so a restored env answers the same actions with the same
observations and rewards as the env it was taken from (`check_snapshot` verifies it; `check_env` runs it for
every env that supports snapshots). An env opts in either by listing its state attributes in
`TextEnv.snapshot_fields` (pickled together, so shared references stay shared, with the seeded random
generator) or by overriding `snapshot` / `restore` itself.

Snapshot bytes are trusted input: restoring runs `pickle`. A server that restores bytes sent by others signs
what it hands out and checks the signature first (agentgym.envs.remote.server).
"""
from __future__ import annotations

import pickle
from typing import Any, Callable, Sequence

import gymnasium as gym

from agentgym.errors import CheckError

# what the base classes set at reset and step reads: gymnasium.Env's seeded generator, and the tool-call
# formats a ToolEnv reads (chosen by reset's `tool_format` option; a restored env must parse the same way)
RESET_FIELDS = ("_np_random", "_np_random_seed", "_formats")


def pickle_fields(env: Any, names: Sequence[str]) -> bytes:
    """The named attributes of `env` (and what its base classes set at reset: `RESET_FIELDS`) as one pickle."""
    state = {name: getattr(env, name) for name in (*names, *RESET_FIELDS) if hasattr(env, name)}
    return pickle.dumps((type(env).__qualname__, state), protocol=pickle.HIGHEST_PROTOCOL)


def unpickle_fields(env: Any, data: bytes) -> None:
    """Set the attributes a `pickle_fields` snapshot holds; refuses a snapshot of another env class."""
    try:
        owner, state = pickle.loads(data)
    except Exception as exc:
        raise ValueError(f"not a snapshot of this env ({type(exc).__name__}: {exc})") from exc
    if owner != type(env).__qualname__:
        raise ValueError(f"this snapshot was taken from a {owner}, not a {type(env).__qualname__}")
    for name, value in state.items():
        setattr(env, name, value)


def supports_snapshot(env: Any) -> bool:
    """Whether `env` (or the env inside its wrappers) can snapshot and restore."""
    base = getattr(env, "unwrapped", env)
    flag = getattr(base, "supports_snapshot", False)
    return bool(flag() if callable(flag) else flag)


def snapshot(env: Any) -> bytes:
    """`env.snapshot()`, through wrappers that keep state of their own (TurnLimit counts turns)."""
    if not supports_snapshot(env):
        raise NotImplementedError(f"{type(getattr(env, 'unwrapped', env)).__name__} does not support snapshots")
    fn = getattr(env, "snapshot", None)
    return fn() if fn is not None else env.unwrapped.snapshot()


def restore(env: Any, data: bytes) -> None:
    if not supports_snapshot(env):
        raise NotImplementedError(f"{type(getattr(env, 'unwrapped', env)).__name__} does not support snapshots")
    fn = getattr(env, "restore", None)
    (fn if fn is not None else env.unwrapped.restore)(data)


def _replay(env: gym.Env, actions: Sequence[str]) -> list[tuple]:
    """(obs, reward, terminated, truncated, success, valid, tool format) for each action, stopping at the
    episode's end."""
    out = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, float(reward), bool(terminated), bool(truncated), info.get("success"),
                    info.get("valid_action"), info.get("tool_format")))
        if terminated or truncated:
            break
    return out


def check_snapshot(env: gym.Env, seed: int, pick_action: Callable[[gym.Env, dict], str], prefix: int = 2,
                   horizon: int = 4, factory: Callable[[], gym.Env] | None = None,
                   options: dict[str, Any] | None = None) -> bool:
    """[snapshot] A restored env answers the same actions with the same observations and rewards.

    Plays `prefix` steps from reset(seed, options), snapshots, plays `horizon` more, restores and replays them;
    then restores into a fresh instance from `factory` (reset with another seed and no options first) and
    replays again, so what the options chose at reset (a tool env's `tool_format`) must travel in the snapshot.
    The snapshot is restored twice, so a restore must not share state with the bytes. False if not supported.
    """
    if not supports_snapshot(env):
        return False
    _, info = env.reset(seed=seed, options=options)
    for _ in range(prefix):
        _, _, terminated, truncated, info = env.step(pick_action(env, info))
        if terminated or truncated:
            _, info = env.reset(seed=seed, options=options)
            break
    data = snapshot(env)
    if not isinstance(data, bytes):
        raise CheckError(f"[snapshot] snapshot() must return bytes, got {type(data).__name__}")
    actions = []
    for _ in range(horizon):   # choose the continuation on the live env, then replay it
        action = pick_action(env, info)
        actions.append(action)
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    restore(env, data)
    first = _replay(env, actions)
    restore(env, data)
    _compare_replays(first, _replay(env, actions), actions, seed, "the same instance")
    if factory is not None:
        fresh = factory()
        try:
            fresh.reset(seed=seed + 1)
            restore(fresh, data)
            _compare_replays(first, _replay(fresh, actions), actions, seed, "a fresh instance")
        finally:
            fresh.close()
    return True


def _compare_replays(first: list[tuple], second: list[tuple], actions: Sequence[str], seed: int, how: str) -> None:
    names = ("observation", "reward", "terminated", "truncated", "success", "valid_action", "tool_format")
    for t, (a, b) in enumerate(zip(first, second)):
        for name, va, vb in zip(names, a, b):
            if va != vb:
                raise CheckError(f"[snapshot] seed {seed}, restored into {how}: {name} differs at step {t} after "
                                 f"restore (action {actions[t][:60]!r}): {str(va)[:120]!r} vs {str(vb)[:120]!r}; "
                                 "snapshot every attribute that step() reads, reset's choices too "
                                 "(TextEnv.snapshot_fields)")
    if len(first) != len(second):
        raise CheckError(f"[snapshot] seed {seed}, restored into {how}: the replay lasted {len(first)} steps, "
                         f"then {len(second)}")

