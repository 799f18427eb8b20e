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
raises `MissingDependencyError`, which `check_all` reports as skipped.
"""
from __future__ import annotations

import json
import math
import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym

from agentgym.engine.budget_check import check_context_budget
from agentgym.errors import CheckError, MissingDependencyError
from agentgym.snapshot import check_snapshot
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


@dataclass
class _Run:
    """One episode played by the checker: the actions and what came back (for the determinism check)."""

    actions: list[str] = field(default_factory=list)
    steps: list[tuple] = field(default_factory=list)


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


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


def _gymnasium_failure(name: str, exc: Exception) -> Exception:
    """What a failing Gymnasium check becomes: the missing dependency it reveals, else a CheckError naming it."""
    missing = as_missing_dependency(exc)
    return missing if missing is not None else CheckError(f"[gymnasium] {name}: {type(exc).__name__}: {exc}")


def _guard(check: str, fn: Callable[[], Any]) -> Any:
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
    instructions = _guard("api", lambda: getattr(base, "instructions", ""))
    if not isinstance(instructions, str):
        raise CheckError(f"[api] `instructions` must be a str, got {type(instructions).__name__}")
    tools = _guard("api", lambda: getattr(base, "tools", []))
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
        if space is None or not all(_guard("api", lambda s=s: space.contains(s)) for s in samples):
            raise CheckError(f"[api] {name} {space!r} must admit any UTF-8 text; use agentgym.Text()")


def check_gymnasium(env: gym.Env, seed: int = 0) -> tuple[str, ...]:
    """[gymnasium] Gymnasium's env-checker pieces that apply to text spaces; returns its warnings.

    The env is reset with `seed` first, so the unseeded resets these pieces make continue a seeded
    stream: the same tasks every run (envs that build tasks slowly, like TextWorld, cache them).
    """
    from gymnasium.utils import env_checker as ec

    base = env.unwrapped
    _guard("gymnasium", lambda: base.reset(seed=seed))
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
                raise _gymnasium_failure(name, exc) from exc
    return tuple(dict.fromkeys(str(w.message) for w in caught))


def check_info(info: Any, where: str, step: bool = True) -> None:
    """[info] and [anchor]: the standard info keys have the right types (step infos must have them all)."""
    if not isinstance(info, dict):
        raise CheckError(f"[info] {where}: info must be a dict, got {type(info).__name__}")
    for key in ("success", "valid_action"):
        if step and key not in info:
            raise CheckError(f"[info] {where}: info has no {key!r}; build infos with agentgym.make_info")
        if key in info and not isinstance(info[key], bool):
            raise CheckError(f"[info] {where}: info[{key!r}] must be a bool, got {_short(info[key])}")
    components = info.get("reward_components", {})
    if not isinstance(components, dict) or not all(
            isinstance(k, str) and _is_number(v) for k, v in components.items()):
        raise CheckError(f"[info] {where}: info['reward_components'] must map str to float, got "
                         f"{_short(components)}")
    admissible = info.get("admissible_actions", [])
    if not isinstance(admissible, (list, tuple)) or not all(isinstance(a, str) for a in admissible):
        raise CheckError(f"[info] {where}: info['admissible_actions'] must be a list of str, got {_short(admissible)}")
    if "task_id" in info and not isinstance(info["task_id"], str):
        raise CheckError(f"[info] {where}: info['task_id'] must be a str, got {_short(info['task_id'])}")
    if "tool_results" in info and not isinstance(info["tool_results"], (list, tuple)):
        raise CheckError(f"[info] {where}: info['tool_results'] must be a list, got {_short(info['tool_results'])}")
    try:
        hash(info.get("anchor"))
    except TypeError as exc:
        raise CheckError(f"[anchor] {where}: info['anchor'] must be hashable (GiGPO groups on it), got "
                         f"{_short(info.get('anchor'))}; use a str or a tuple") from exc


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
                         f"(too long, or not valid UTF-8, e.g. an echoed lone surrogate): {_short(obs)}")


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
        raise CheckError(f"[reward] {where}: the reward must be a finite number, got {_short(reward)}")
    total = sum(float(v) for v in info.get("reward_components", {}).values())
    if abs(float(reward) - total) > 1e-6:
        raise CheckError(f"[reward] {where}: reward {reward!r} != sum of reward_components {total!r} "
                         f"({_short(info.get('reward_components'))}); name every part of the reward")
    return result


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
    return _guard("oracle", fn) if fn else None


def _pick_action(env: gym.Env, info: dict, rng: random.Random) -> str:
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


def _snapshot_reset_options(env: gym.Env) -> dict[str, str]:
    """Reset options as a rollout passes them, naming a tool-call format other than the env's own default, so
    the snapshot check sees whether a restored env still reads the format chosen at reset."""
    default = (getattr(env.unwrapped, "tool_formats", None) or ("hermes",))[0]
    return {"tool_format": next(name for name in FORMATS if name != default)}


def _play(env: gym.Env, seed: int, max_steps: int, actions: Sequence[str] | None = None) -> _Run:
    """One checked episode from reset(seed); replays `actions` when given, else picks its own."""
    run, rng = _Run(), random.Random(seed)
    result = _guard("api", lambda: env.reset(seed=seed))
    if not isinstance(result, tuple) or len(result) != 2:
        raise CheckError(f"[api] reset(seed={seed}) must return (obs, info), got {_short(result)}")
    obs, info = result
    check_observation(env, obs, f"reset(seed={seed})")
    check_info(info, f"reset(seed={seed})", step=False)
    run.steps.append(_fingerprint(obs, info))
    for t in range(len(actions) if actions is not None else max_steps):
        action = actions[t] if actions is not None else _pick_action(env, info, rng)
        where = f"seed {seed}, step {t}, action {_short(action, 60)}"
        result = check_step_result(env, _guard("api", lambda: env.step(action)), where)
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
                at = "reset" if t == 0 else f"step {t - 1} (action {_short(first.actions[t - 1], 60)})"
                raise CheckError(f"[determinism] seed {seed}, {how}: {key} differs after {at}: {_short(va)} vs "
                                 f"{_short(vb)}; draw every random choice from self.np_random after reset(seed)")
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
            fresh = _guard("api", factory)
            try:
                _compare(first, _play(fresh, seed, max_steps, first.actions), seed, "a fresh instance")
            finally:
                _guard("close", fresh.close)


def check_same_seed_same_task(env: gym.Env, seed: int = 123, steps: int = 3) -> None:
    """The cheap determinism check CI runs over every registered id (tests/test_determinism_all.py):
    Gymnasium's own reset-seed and step determinism checks, then reset(seed) twice on the same instance
    gives the same observation and info, and `steps` steps of the same actions give the same results.
    A group of G rollouts is G plays of one task only if this holds."""
    from gymnasium.utils import env_checker as ec

    base = env.unwrapped
    for name, piece in (("reset seed determinism", ec.check_reset_seed_determinism),
                        ("step determinism", ec.check_step_determinism)):
        _guard("gymnasium", lambda: base.reset(seed=seed))
        try:
            piece(base)
        except (MissingDependencyError, CheckError):
            raise
        except Exception as exc:
            raise _gymnasium_failure(name, exc) from exc
    first = _play(env, seed, steps)
    _compare(first, _play(env, seed, steps, first.actions), seed, "the same instance reset again")


def check_any_string(env: gym.Env, seed: int, garbage: Sequence[tuple[str, str]] = GARBAGE_ACTIONS,
                     garbage_is_invalid: bool = True) -> None:
    """[any string] Adversarial strings never raise, and are flagged invalid with feedback."""
    _guard("any string", lambda: env.reset(seed=seed))
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
            raise CheckError(f"[any string] the {name} action {_short(action, 60)} was reported valid; set "
                             "info['valid_action']=False for actions that do not parse or are not admissible")
        if garbage_is_invalid and not obs.strip():
            raise CheckError(f"[any string] the {name} action got an empty observation; say what was wrong "
                             "and how to act instead")
        if terminated or truncated:
            _guard("any string", lambda: env.reset(seed=seed))


def _turn_limit(env: gym.Env) -> int | None:
    from agentgym.registration import TurnLimit

    while isinstance(env, gym.Wrapper):
        if isinstance(env, TurnLimit):
            return env.max_turns
        env = env.env
    return None


def check_oracle(env: gym.Env, seed: int, default_limit: int = 100) -> bool:
    """[oracle] Following `oracle_action()` is valid every turn and solves the task; False if no oracle."""
    _guard("oracle", lambda: env.reset(seed=seed))
    action = _oracle(env)
    if action is None:
        return False
    limit = _turn_limit(env) or default_limit
    for t in range(limit):
        if not isinstance(action, str):
            raise CheckError(f"[oracle] seed {seed}, step {t}: oracle_action() must return a str or None, "
                             f"got {_short(action)}")
        where = f"seed {seed}, step {t}, oracle action {_short(action, 60)}"
        obs, _, terminated, truncated, info = check_step_result(env, _guard("oracle", lambda: env.step(action)),
                                                                where)
        if not info["valid_action"]:
            raise CheckError(f"[oracle] {where}: the oracle's action was not valid: {_short(obs)}")
        if terminated or truncated:
            if info["success"]:
                return True
            break
        action = _oracle(env)
        if action is None:
            break
    raise CheckError(f"[oracle] seed {seed}: following oracle_action() did not solve the task within {limit} "
                     "turns; fix the oracle, or return None from oracle_action() after reset where it cannot "
                     "solve the task")


def check_turn_limit(env: gym.Env) -> bool:
    """[turn limit] With a registered max_turns, the episode ends by that turn; False if there is none."""
    limit = _turn_limit(env)
    if not limit:
        return False
    _guard("turn limit", lambda: env.reset(seed=0))
    for _ in range(limit):
        _, _, terminated, truncated, _ = _guard("turn limit", lambda: env.step("florp"))
        if terminated or truncated:
            return True
    raise CheckError(f"[turn limit] the episode did not end after max_turns={limit} turns")


def check_render_and_close(env: gym.Env, factory: Callable[[], gym.Env] | None) -> None:
    """[render] render() gives text or None; [close] close() twice is fine (on a fresh instance too)."""
    _guard("render", lambda: env.reset(seed=0))
    text = _guard("render", env.render)
    if text is not None and not isinstance(text, str):
        raise CheckError(f"[render] render() must return text or None, got {type(text).__name__}")
    others = [_guard("close", factory)] if factory is not None else []
    for target in [env, *others]:
        _guard("close", target.close)
        _guard("close", target.close)


# ----------------------------------------------------------------------------------------------- entry points

def _resolve(env_or_id: Any, make_kwargs: dict[str, Any]) -> tuple[str, Callable[[], gym.Env] | None, gym.Env]:
    if isinstance(env_or_id, str):
        from agentgym.registration import make, spec

        spec(env_or_id)  # an unknown id raises RegistrationError with "did you mean"
        factory = lambda: make(env_or_id, **make_kwargs)  # noqa: E731
        return env_or_id, factory, _guard("api", factory)
    if isinstance(env_or_id, gym.Env):
        env_spec = env_or_id.spec
        return (env_spec.id if env_spec else type(env_or_id.unwrapped).__name__), None, env_or_id
    if callable(env_or_id):
        env = _guard("api", env_or_id)
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
        pick = lambda e, info, rng=random.Random(seeds[0]): _pick_action(e, info, rng)  # noqa: E731
        if _guard("snapshot", lambda: check_snapshot(env, seeds[0], pick, factory=factory,
                                                     options=_snapshot_reset_options(env))):
            passed.append("snapshot")
        budget = _guard("context budget", lambda: check_context_budget(env, env_id, seeds[0], max_steps, pick))
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
