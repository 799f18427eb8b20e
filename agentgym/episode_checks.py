"""The checks of `check_env` that play episodes (agentgym/checker.py): determinism on a reused and a fresh
instance (every step's observation, info and reward checked on the way), the cheap same-seed check CI runs
over every id, adversarial strings, the oracle, the turn limit, render and close.

Episodes pick a mix of the oracle's, admissible, tool-shaped and probing actions (`pick_action`), so they
visit real states; a replay repeats the first play's actions and must see the same fingerprints.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym

from agentgym.errors import CheckError, MissingDependencyError
from agentgym.step_checks import (check_info, check_observation, check_step_result, difference, guard,
                                  gymnasium_failure, short)
from agentgym.toolcall_formats import FORMATS

GARBAGE_ACTIONS: tuple[tuple[str, str], ...] = (
    ("empty", ""),
    ("whitespace", " \t\n\r  \n"),
    ("one megabyte", ("garbage " * 125_000)[:1_000_000]),
    ("control characters", "".join(map(chr, range(32))) + "\x7f\x1b[2J\x00"),
    ("binary-ish", bytes(range(256)).decode("latin-1") * 4),
    ("unicode", "¿Qué? 日本語 🤖🔑 مرحبا e\u0301 \u200b\ufeff\u202e zalgo: z\u0336\u0334a\u0337"),
    ("lone surrogates", "\ud800 abc \udfff"),
    ("nonsense words", "florp the zibble quux"),
    ("malformed tool call", '<tool_call>{"name": "answer", "arguments": {"text": </tool_call>'),
    ("unknown tool", '<tool_call>{"name": "no_such_tool_zz", "arguments": {}}</tool_call>'),
    ("wrong tool-call types", '<tool_call>{"name": 42, "arguments": [1, 2]}</tool_call>'),
    ("escaped surrogates in JSON", '<tool_call>{"name": "\\ud800", "arguments": {"x": "\\udfff"}}</tool_call>'),
    ("deeply nested JSON", "[" * 50_000),
    ("unclosed tags", "<action>" * 5_000 + "<tool_call>" * 2_000),
    ("empty action tag", "<action></action>"),
)
PROBE_ACTIONS = ("look", "help", "inventory", "<answer>0</answer>", "yes", "")
STANDARD_KEYS = ("success", "valid_action", "anchor", "reward_components", "admissible_actions", "task_id")


@dataclass
class _Run:
    """One episode played by the checker: the actions and what came back (for the determinism check)."""

    actions: list[str] = field(default_factory=list)
    steps: list[tuple] = field(default_factory=list)


def _freeze(value: Any) -> Any:
    """A comparable form of an info value (dicts and lists become tuples)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _fingerprint(obs: str, info: dict, reward: float = 0.0, terminated: bool = False, truncated: bool = False
                 ) -> tuple:
    """What must repeat under the same seed and actions (tool timings are left out: they never repeat)."""
    tool_results = tuple((getattr(r, "name", r), getattr(r, "output", None), getattr(r, "ok", None))
                         for r in info.get("tool_results", ()))
    keys = tuple((k, _freeze(info.get(k))) for k in STANDARD_KEYS)
    return (("observation", obs), ("reward", float(reward)), ("terminated", terminated),
            ("truncated", truncated), *keys, ("tool_results", tool_results))


def _oracle(env: gym.Env) -> str | None:
    fn = getattr(env, "oracle_action", None) or getattr(env.unwrapped, "oracle_action", None)
    return guard("oracle", fn) if fn else None


def pick_action(env: gym.Env, info: dict, rng: random.Random) -> str:
    """A mix of good, admissible, tool-shaped and probing actions, so episodes visit real states."""
    roll = rng.random()
    good = _oracle(env) if roll < 0.5 else None
    if good is not None:
        return good
    admissible = info.get("admissible_actions")
    if admissible and roll < 0.85:
        return rng.choice(list(admissible))
    tools = getattr(env.unwrapped, "tools", [])
    if tools and roll < 0.95:
        return rng.choice(list(tools)).usage()
    return rng.choice(PROBE_ACTIONS)


def snapshot_reset_options(env: gym.Env) -> dict[str, str]:
    """Reset options as a rollout passes them, naming a tool-call format other than the env's own default, so
    the snapshot check sees whether a restored env still reads the format chosen at reset."""
    default = (getattr(env.unwrapped, "tool_formats", None) or ("hermes",))[0]
    return {"tool_format": next(name for name in FORMATS if name != default)}


def _play(env: gym.Env, seed: int, max_steps: int, actions: Sequence[str] | None = None) -> _Run:
    """One checked episode from reset(seed); replays `actions` when given, else picks its own."""
    run, rng = _Run(), random.Random(seed)
    result = guard("api", lambda: env.reset(seed=seed))
    if not isinstance(result, tuple) or len(result) != 2:
        raise CheckError(f"[api] reset(seed={seed}) must return (obs, info), got {short(result)}")
    obs, info = result
    check_observation(env, obs, f"reset(seed={seed})")
    check_info(info, f"reset(seed={seed})", step=False)
    run.steps.append(_fingerprint(obs, info))
    for t in range(len(actions) if actions is not None else max_steps):
        action = actions[t] if actions is not None else pick_action(env, info, rng)
        where = f"seed {seed}, step {t}, action {short(action, 60)}"
        result = check_step_result(env, guard("api", lambda: env.step(action)), where)
        obs, reward, terminated, truncated, info = result
        run.actions.append(action)
        run.steps.append(_fingerprint(obs, info, reward, terminated, truncated))
        if terminated or truncated:
            break
    return run


def _compare(first: _Run, second: _Run, seed: int, how: str) -> None:
    for t, (a, b) in enumerate(zip(first.steps, second.steps)):
        for (key, va), (_, vb) in zip(a, b):
            if va != vb:
                at = "reset" if t == 0 else f"step {t - 1} (action {short(first.actions[t - 1], 60)})"
                raise CheckError(f"[determinism] seed {seed}, {how}: {key} differs after {at}: {difference(va, vb)}; "
                                 "draw every random choice from self.np_random after reset(seed)")
    if len(first.steps) != len(second.steps):
        raise CheckError(f"[determinism] seed {seed}, {how}: the episode lasted {len(first.steps) - 1} steps, "
                         f"then {len(second.steps) - 1} with the same actions")


def _check_sets_anchor(run: _Run, seed: int) -> None:
    """[anchor] Some info of an episode must carry an anchor: without one the rollout falls back to the
    observation text, which is rarely the env's notion of "the same state"."""
    if all(value is None for step in run.steps for key, value in step if key == "anchor"):
        raise CheckError(f"[anchor] seed {seed}: no reset or step info sets info['anchor'] (GiGPO groups turns on "
                         "it); pass make_info(anchor=..., observation=obs) or return TextEnv.finish_info(obs, info)")


def check_determinism(env: gym.Env, factory: Callable[[], gym.Env] | None, seeds: Sequence[int],
                      max_steps: int) -> None:
    """[determinism] plus the per-step checks: same seed and actions, same results, fresh or reused env."""
    for seed in seeds:
        first = _play(env, seed, max_steps)
        _check_sets_anchor(first, seed)
        _compare(first, _play(env, seed, max_steps, first.actions), seed, "the same instance reset again")
        if factory is not None:
            fresh = guard("api", factory)
            try:
                _compare(first, _play(fresh, seed, max_steps, first.actions), seed, "a fresh instance")
            finally:
                guard("close", fresh.close)


def check_same_seed_same_task(env: gym.Env, seed: int = 123, steps: int = 3) -> None:
    """The cheap determinism check CI runs over every registered id (tests/test_determinism_all.py):
    Gymnasium's own reset-seed and step determinism checks, then reset(seed) twice on the same instance
    gives the same observation and info, and `steps` steps of the same actions give the same results.
    A group of G rollouts is G plays of one task only if this holds."""
    from gymnasium.utils import env_checker as ec

    base = env.unwrapped
    for name, piece in (("reset seed determinism", ec.check_reset_seed_determinism),
                        ("step determinism", ec.check_step_determinism)):
        guard("gymnasium", lambda: base.reset(seed=seed))
        try:
            piece(base)
        except (MissingDependencyError, CheckError):
            raise
        except Exception as exc:
            raise gymnasium_failure(name, exc) from exc
    first = _play(env, seed, steps)
    _compare(first, _play(env, seed, steps, first.actions), seed, "the same instance reset again")


def check_any_string(env: gym.Env, seed: int, garbage: Sequence[tuple[str, str]] = GARBAGE_ACTIONS,
                     garbage_is_invalid: bool = True) -> None:
    """[any string] Adversarial strings never raise, and are flagged invalid with feedback."""
    guard("any string", lambda: env.reset(seed=seed))
    for name, action in garbage:
        try:
            result = env.step(action)
        except (CheckError, MissingDependencyError):
            raise
        except Exception as exc:
            raise CheckError(f"[any string] the {name} action raised {type(exc).__name__}: {exc}; any string is a "
                             "legal action: answer bad input with an observation and valid_action=False") from exc
        obs, _, terminated, truncated, info = check_step_result(env, result, f"the {name} action")
        if garbage_is_invalid and info["valid_action"]:
            raise CheckError(f"[any string] the {name} action {short(action, 60)} was reported valid; set "
                             "info['valid_action']=False for actions that do not parse or are not admissible")
        if garbage_is_invalid and not obs.strip():
            raise CheckError(f"[any string] the {name} action got an empty observation; say what was wrong "
                             "and how to act instead")
        if terminated or truncated:
            guard("any string", lambda: env.reset(seed=seed))


def _turn_limit(env: gym.Env) -> int | None:
    from agentgym.registration import TurnLimit

    while isinstance(env, gym.Wrapper):
        if isinstance(env, TurnLimit):
            return env.max_turns
        env = env.env
    return None


def check_oracle(env: gym.Env, seed: int, default_limit: int = 100) -> bool:
    """[oracle] Following `oracle_action()` is valid every turn and solves the task; False if no oracle.

    An id declared random-outcome (`agentgym.horizon.declare_random_outcome`: the env's dice can defeat even
    its oracle) is held to what `agentgym check --oracle` holds it to: a rejected step or an unsolved end is a
    miss (False), not a failure; a non-str action or a crash still fails."""
    guard("oracle", lambda: env.reset(seed=seed))
    action = _oracle(env)
    if action is None:
        return False
    random = _random_outcome(env)
    limit = _turn_limit(env) or default_limit
    for t in range(limit):
        if not isinstance(action, str):
            raise CheckError(f"[oracle] seed {seed}, step {t}: oracle_action() must return a str or None, "
                             f"got {short(action)}")
        where = f"seed {seed}, step {t}, oracle action {short(action, 60)}"
        obs, _, terminated, truncated, info = check_step_result(env, guard("oracle", lambda: env.step(action)),
                                                                where)
        if not info["valid_action"]:
            if random:
                return False
            raise CheckError(f"[oracle] {where}: the oracle's action was not valid: {short(obs)}")
        if terminated or truncated:
            if info["success"]:
                return True
            break
        action = _oracle(env)
        if action is None:
            break
    if random:
        return False
    raise CheckError(f"[oracle] seed {seed}: following oracle_action() did not solve the task within {limit} "
                     "turns; fix the oracle, or return None from oracle_action() after reset where it cannot "
                     "solve the task")


def _random_outcome(env: gym.Env) -> str:
    """Why the registered id's oracle may fail (declared random outcome), or "" (unregistered: never)."""
    from agentgym.horizon import random_outcome

    spec = getattr(env, "spec", None)
    return random_outcome(spec.id) if spec is not None and spec.id else ""


def check_turn_limit(env: gym.Env) -> bool:
    """[turn limit] With a registered max_turns, the episode ends by that turn; False if there is none."""
    limit = _turn_limit(env)
    if not limit:
        return False
    guard("turn limit", lambda: env.reset(seed=0))
    for _ in range(limit):
        _, _, terminated, truncated, _ = guard("turn limit", lambda: env.step("florp"))
        if terminated or truncated:
            return True
    raise CheckError(f"[turn limit] the episode did not end after max_turns={limit} turns")


def check_render_and_close(env: gym.Env, factory: Callable[[], gym.Env] | None) -> None:
    """[render] render() gives text or None; [close] close() twice is fine (on a fresh instance too)."""
    guard("render", lambda: env.reset(seed=0))
    text = guard("render", env.render)
    if text is not None and not isinstance(text, str):
        raise CheckError(f"[render] render() must return text or None, got {type(text).__name__}")
    others = [guard("close", factory)] if factory is not None else []
    for target in [env, *others]:
        guard("close", target.close)
        guard("close", target.close)
