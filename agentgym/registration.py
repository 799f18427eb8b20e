"""Register, make and list text envs; named suites; third-party discovery.

Built on Gymnasium's registry, so `gymnasium.make("agentgym/Toy-Corridor-v0")` works too. The turn
limit (`max_turns`) is a `TurnLimit` wrapper that sets `truncated`, not each env's business.
Third-party packages expose envs through the entry-point group `agentgym.envs`: each entry point is a
module or a zero-argument callable that calls `agentgym.register(...)`.
"""
from __future__ import annotations

import dataclasses
import difflib
import struct
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from agentgym.errors import RegistrationError

ENTRY_POINT_GROUP = "agentgym.envs"
_SUITES: dict[str, list["SuiteEntry"]] = {}
_IDS: set[str] = set()  # ids registered through agentgym, as opposed to gymnasium's own
_REWARD_RANGES: dict[str, tuple[float, float]] = {}  # declared at registration (register(reward_range=))
_CONTEXTS: dict[str, Any] = {}  # register(context=): an agentgym.horizon.ContextDefaults per id
_DISCOVERED = False
_DISCOVERY_LOCK = threading.RLock()  # env pools make envs from many threads at once
_TURNS = struct.Struct("<I")  # TurnLimit's turn count, in front of the inner env's snapshot
REMOTE_PREFIX = "remote:"
REMOTE_ENV_ID = "agentgym/Remote-v0"


@dataclass(frozen=True)
class SuiteEntry:
    """One env of a suite, with the kwargs it is made with and a label for reports."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.env_id


class TurnLimit(gym.Wrapper):
    """Truncates an episode after `max_turns` steps and forwards the text-env extras."""

    def __init__(self, env: gym.Env, max_turns: int):
        super().__init__(env)
        if max_turns < 1:
            raise RegistrationError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self._turns = 0

    def reset(self, **kwargs: Any):
        self._turns = 0
        return self.env.reset(**kwargs)

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._turns += 1
        if self._turns >= self.max_turns and not terminated:
            truncated = True
        return obs, reward, terminated, truncated, info

    @property
    def instructions(self) -> str:
        return self.env.unwrapped.instructions

    @property
    def tools(self) -> list:
        return self.env.unwrapped.tools

    def oracle_action(self) -> str | None:
        return self.env.unwrapped.oracle_action()

    def state_summary(self) -> str:
        summary = getattr(self.env.unwrapped, "state_summary", None)
        return summary() if callable(summary) else ""

    def render(self):
        return self.env.render()

    # snapshots carry the turn count too, so a restored episode is cut off on the same turn
    def supports_snapshot(self) -> bool:
        from agentgym.snapshot import supports_snapshot

        return supports_snapshot(self.env)

    def snapshot(self) -> bytes:
        from agentgym.snapshot import snapshot

        return _TURNS.pack(self._turns) + snapshot(self.env)

    def restore(self, data: bytes) -> None:
        from agentgym.snapshot import restore

        if len(data) < _TURNS.size:
            raise ValueError("not a snapshot of a turn-limited env (too short)")
        restore(self.env, data[_TURNS.size:])
        self._turns = _TURNS.unpack(data[:_TURNS.size])[0]


def register(id: str, entry_point: str | Callable[..., gym.Env], max_turns: int | None = None,
             kwargs: dict[str, Any] | None = None, suites: tuple[str, ...] = (), override: bool = False,
             reward_range: tuple[float, float] | None = None, context: Any = None,
             **spec_kwargs: Any) -> None:
    """Register an env id. `entry_point` is `"module:Class"` or a callable returning an env. `reward_range`
    declares [lo, hi] of one step's reward for envs that do not set `TextEnv.reward_range` themselves;
    `context` (an `agentgym.horizon.ContextDefaults`) its horizon and the rollout settings its long episodes fit in."""
    if context is not None and not callable(getattr(context, "settings", None)):
        raise RegistrationError(f"register({id!r}, context=...) takes an agentgym.horizon.ContextDefaults, "
                                f"got {type(context).__name__}")
    if reward_range is not None:
        lo, hi = _checked_range(reward_range, f"register({id!r}, reward_range=...)")
    if id in gym.registry and not override:
        if gym.registry[id].entry_point == entry_point:
            _IDS.add(id)
            _set_context(id, context)
            return  # re-importing a module that registers is harmless
        raise RegistrationError(f"{id!r} is already registered; pass override=True to replace it")
    gym.register(id=id, entry_point=entry_point, max_episode_steps=max_turns, kwargs=kwargs or {},
                 disable_env_checker=True, **spec_kwargs)
    _IDS.add(id)
    _set_context(id, context)
    _REWARD_RANGES.pop(id, None)
    if reward_range is not None:
        _REWARD_RANGES[id] = (lo, hi)
    for suite_name in suites:
        register_suite(suite_name, [id], extend=True)


def _set_context(id: str, context: Any) -> None:
    if context is None:
        _CONTEXTS.pop(id, None)
    else:
        _CONTEXTS[id] = context


def registered_context(id: str) -> Any:
    """The `context=` an id was registered with (an agentgym.horizon.ContextDefaults), or None."""
    discover()
    return _CONTEXTS.get(id)


def discover() -> None:
    """Register built-in envs and those of installed packages (their corpus sources too), once."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    with _DISCOVERY_LOCK:
        if _DISCOVERED:
            return
        import agentgym.envs  # noqa: F401  registers the built-in families (string entry points, no heavy imports)
        _load_plugins()
        _DISCOVERED = True


def _load_plugins() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = ep.load()
            if callable(loaded):
                loaded()
        except Exception as exc:  # a broken plugin must not break every other env
            import warnings

            warnings.warn(f"agentgym: could not load env plugin {ep.name!r} ({ep.value}): {exc}", stacklevel=2)


def list_envs(prefix: str = "") -> list[str]:
    """Every env id registered through agentgym (built-in and plugins), sorted."""
    discover()
    return sorted(i for i in _IDS if i.startswith(prefix))


def remote_alias(id: str) -> dict[str, str] | None:
    """`remote:URL/ENV_ID` -> the kwargs of agentgym/Remote-v0 (url, env_id); None for any other id."""
    if not id.startswith(REMOTE_PREFIX):
        return None
    rest = id[len(REMOTE_PREFIX):]
    scheme, sep, tail = rest.partition("://")
    host, slash, env_id = tail.partition("/")
    if not sep or scheme not in ("http", "https") or not host or not slash or not env_id:
        raise RegistrationError(f"bad remote env id {id!r}; write remote:http://HOST:PORT/ENV_ID, e.g. "
                                "remote:http://127.0.0.1:8020/agentgym/Toy-KeyDoor-v0 (see `agentgym serve env`)")
    return {"url": f"{scheme}://{host}", "env_id": env_id}


def spec(id: str) -> EnvSpec:
    """The spec of a registered id (`remote:URL/ID` gives agentgym/Remote-v0's, with its url and env_id),
    or an error that suggests the closest ids."""
    discover()
    remote = remote_alias(id)
    if remote is not None:
        base = spec(REMOTE_ENV_ID)
        return dataclasses.replace(base, kwargs={**base.kwargs, **remote})
    if id in gym.registry:
        return gym.registry[id]
    known = list(gym.registry)
    close = difflib.get_close_matches(id, known, n=3, cutoff=0.5)
    lowered = {k.lower(): k for k in known}
    if id.lower() in lowered:
        close = [lowered[id.lower()]]
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise RegistrationError(f"no env registered as {id!r}.{hint} Run `agentgym list` to see every id.")


def make(id: str, max_turns: int | None = None, **kwargs: Any) -> gym.Env:
    """Make a text env; `max_turns` overrides the registered turn limit. `remote:URL/ID` plays the env a
    server (`agentgym serve env ID`) holds at URL."""
    env_spec = spec(id)
    creator = env_spec.entry_point if callable(env_spec.entry_point) else load_env_creator(env_spec.entry_point)
    env = creator(**{**env_spec.kwargs, **kwargs})
    limit = max_turns if max_turns is not None else env_spec.max_episode_steps
    # The spec records what this env was made with, so `env.spec.make()` rebuilds the same env.
    env.unwrapped.spec = dataclasses.replace(env_spec, kwargs={**env_spec.kwargs, **kwargs},
                                             max_episode_steps=limit or None)
    if id in _REWARD_RANGES and getattr(env.unwrapped, "reward_range", None) is None:
        setattr(env.unwrapped, "reward_range", _REWARD_RANGES[id])  # not every gymnasium Env has the field
    return TurnLimit(env, limit) if limit else env


def reward_range(env: gym.Env) -> tuple[float, float] | None:
    """The [lo, hi] of one step's reward that `env` declares (TextEnv.reward_range, or the registration's),
    or None."""
    declared = getattr(env.unwrapped, "reward_range", None)
    return None if declared is None else _checked_range(declared, f"{type(env.unwrapped).__name__}.reward_range")


def _checked_range(value: Any, where: str) -> tuple[float, float]:
    import math

    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise RegistrationError(f"{where} must be (lo, hi), two numbers; got {value!r}") from None
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise RegistrationError(f"{where} must be (lo, hi) with lo <= hi; got {value!r}")
    return lo, hi


def register_suite(name: str, envs: list[str | SuiteEntry], extend: bool = False) -> None:
    """Name a list of envs (ids or `SuiteEntry`s) so `agentgym eval --suite NAME` can run them."""
    entries = [e if isinstance(e, SuiteEntry) else SuiteEntry(e) for e in envs]
    if extend:
        existing = _SUITES.setdefault(name, [])
        existing.extend(e for e in entries if e not in existing)
    else:
        _SUITES[name] = entries


def suite(name: str) -> list[SuiteEntry]:
    """The envs of a named suite."""
    discover()
    if name not in _SUITES:
        close = difflib.get_close_matches(name, list(_SUITES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise RegistrationError(f"no suite named {name!r}.{hint} Known suites: {', '.join(sorted(_SUITES))}")
    return list(_SUITES[name])


def list_suites() -> list[str]:
    discover()
    return sorted(_SUITES)
