"""Rubrics: a reward made of weighted, named reward functions over the finished episode.

    rubric = Rubric([RubricItem("correct", exact_answer, 1.0),
                     RubricItem("short", lambda ep: -len(ep.steps), 0.05)])
    env = RubricWrapper(agentgym.make("agentgym/Toy-Calculator-v0"), rubric)

A reward function takes an `Episode` (the task, every action / observation / info, the final answer)
and returns a float, or None when it cannot score. Each item becomes one key of `reward_components`
on the episode's last step (weight × score), so the trainer and the reports show it separately; a
function that raises or returns None is recorded in `info["rubric_errors"]` and scores nothing — one
broken judge never crashes a rollout. From YAML (a suite entry or a training config):

    id: agentgym/Rubric-v0
    kwargs:
      env: agentgym/Toy-Calculator-v0
      env_max_turns: 4                  # the inner turn limit: the wrapper scores on truncation by it
      rubric:
        - {name: correct, fn: exact_answer, weight: 1.0}
        - {name: judge, fn: judge, weight: 0.5, kwargs: {model: "openai:http://127.0.0.1:8000"}}

Core-light: this module imports only gymnasium; a judge is imported when a rubric names it.
"""
from __future__ import annotations

import importlib
import math
import pickle
import re
import string
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym

from agentgym.errors import ConfigError
from agentgym.toolcalls import extract_tag

RewardFn = Callable[["Episode"], "float | None"]


@dataclass(frozen=True)
class Step:
    """One env step as the wrapper saw it."""

    action: str
    observation: str
    reward: float
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Episode:
    """A finished (or cut) episode: what reward functions and judges read."""

    task: str                                   # the first observation
    instructions: str = ""
    steps: tuple[Step, ...] = ()
    reset_info: Mapping[str, Any] = field(default_factory=dict)
    success: bool = False                       # the env's own verdict on the last step
    truncated: bool = False

    @property
    def answer(self) -> str | None:
        """The final answer: the last `<answer>` tag, or the argument of a final `answer`/`submit` call."""
        for step in reversed(self.steps):
            tagged = extract_tag(step.action, "answer")
            if tagged is not None:
                return tagged
            for result in step.info.get("tool_results") or ():
                if getattr(result, "ok", False) and getattr(result, "name", "") in ("answer", "submit"):
                    args = getattr(result, "arguments", {}) or {}
                    return str(next(iter(args.values()), "")) if args else ""
        return None

    @property
    def reference(self) -> str | None:
        """The task's reference answer, where the env puts one in the reset info (`reference` or `answer`)."""
        value = self.reset_info.get("reference", self.reset_info.get("answer"))
        return None if value is None else str(value)

    @property
    def env_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    def transcript(self, max_chars: int = 6000) -> str:
        """The conversation as plain text for a judge; long middles are cut, the ends are kept."""
        parts = [f"TASK:\n{self.task}"]
        for i, step in enumerate(self.steps, 1):
            parts.append(f"AGENT (turn {i}):\n{step.action}")
            parts.append(f"ENVIRONMENT:\n{step.observation}")
        text = "\n\n".join(parts)
        if len(text) <= max_chars:
            return text
        half = max_chars // 2
        return f"{text[:half]}\n\n[... {len(text) - max_chars} characters cut ...]\n\n{text[-half:]}"


@dataclass(frozen=True)
class RubricItem:
    """One named, weighted reward function."""

    name: str
    fn: RewardFn
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ConfigError("a rubric item needs a non-empty `name`")
        if not callable(self.fn):
            raise ConfigError(f"rubric item {self.name!r}: `fn` must be callable, got {type(self.fn).__name__}")
        if not isinstance(self.weight, (int, float)) or not math.isfinite(self.weight):
            raise ConfigError(f"rubric item {self.name!r}: `weight` must be a finite number, got {self.weight!r}")


@dataclass(frozen=True)
class RubricScore:
    """What a rubric gave one episode: weighted components, raw scores, and the items that failed."""

    components: dict[str, float]
    raw: dict[str, float]
    errors: dict[str, str]

    @property
    def total(self) -> float:
        return float(sum(self.components.values()))


class Rubric:
    """Weighted reward functions; `score(episode)` runs them (concurrently: judges wait on the network)."""

    def __init__(self, items: Sequence[RubricItem], max_workers: int = 4):
        names = [i.name for i in items]
        if not items:
            raise ConfigError("a rubric needs at least one item")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"rubric item names must be unique; {dupes} appear twice")
        self.items = tuple(items)
        self.max_workers = max_workers

    def score(self, episode: Episode) -> RubricScore:
        def run(item: RubricItem) -> tuple[float | None, str | None]:
            try:
                value = item.fn(episode)
            except Exception as exc:  # a broken reward function scores nothing; the record says why
                return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]
            if value is None:
                return None, "no score"
            try:
                value = float(value)
            except (TypeError, ValueError):
                return None, f"returned {type(value).__name__}, not a number"
            return (value, None) if math.isfinite(value) else (None, f"returned {value}")

        if len(self.items) == 1 or self.max_workers <= 1:
            outcomes = [run(i) for i in self.items]
        else:
            with ThreadPoolExecutor(min(self.max_workers, len(self.items))) as pool:
                outcomes = list(pool.map(run, self.items))
        components, raw, errors = {}, {}, {}
        for item, (value, error) in zip(self.items, outcomes):
            if error is not None:
                errors[item.name] = error
            else:
                raw[item.name] = value
                components[item.name] = item.weight * value
        return RubricScore(components, raw, errors)

    @classmethod
    def from_config(cls, config: Any) -> Rubric:
        """A rubric from a list of `{name, fn, weight, kwargs}` mappings (see the module docstring)."""
        if isinstance(config, Rubric):
            return config
        if not isinstance(config, (list, tuple)) or not config:
            raise ConfigError("`rubric` must be a non-empty list of items like {name: correct, fn: exact_answer, "
                              "weight: 1.0}")
        return cls([item if isinstance(item, RubricItem) else _item_from_config(item, i)
                    for i, item in enumerate(config)])


# ------------------------------------------------------------------------------------ built-in functions

def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the SQuAD normalisation)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def success(episode: Episode) -> float:
    """1.0 when the env says the task is solved."""
    return float(episode.success)


def exact_answer(episode: Episode) -> float | None:
    """1.0 when the normalised final answer equals the normalised reference; None without a reference."""
    if episode.reference is None:
        return None
    return float(episode.answer is not None and normalize_answer(episode.answer) == normalize_answer(episode.reference))


def contains_answer(episode: Episode) -> float | None:
    """1.0 when the normalised reference appears in the normalised final answer."""
    if episode.reference is None:
        return None
    return float(episode.answer is not None and normalize_answer(episode.reference) in normalize_answer(episode.answer))


def answered(episode: Episode) -> float:
    """1.0 when the episode ends with a final answer at all (a format reward)."""
    return float(episode.answer is not None)


def num_turns(episode: Episode) -> float:
    """The number of turns (give it a negative weight for a length penalty)."""
    return float(len(episode.steps))


def invalid_actions(episode: Episode) -> float:
    """How many actions were invalid (give it a negative weight)."""
    return float(sum(not s.info.get("valid_action", True) for s in episode.steps))


def env_reward(episode: Episode) -> float:
    """The env's own return, as one rubric item (useful with keep_env_reward=False)."""
    return episode.env_reward


BUILTINS: dict[str, Any] = {
    "success": success, "exact_answer": exact_answer, "contains_answer": contains_answer, "answered": answered,
    "num_turns": num_turns, "invalid_actions": invalid_actions, "env_reward": env_reward,
    "judge": "agentgym.tools.judges:LLMJudge",
}


def _resolve(name: str, where: str) -> Any:
    target = BUILTINS.get(name, name)
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    if not attr:
        raise ConfigError(f"{where}: unknown reward function {name!r}; use a built-in ({', '.join(BUILTINS)}) "
                          "or 'package.module:function'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}: cannot import {target!r} ({exc})") from exc


def _item_from_config(item: Any, index: int) -> RubricItem:
    where = f"rubric item {index}"
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a mapping like {{name: correct, fn: exact_answer, weight: 1.0}}")
    unknown = sorted(set(item) - {"name", "fn", "weight", "kwargs"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: name, fn, weight, kwargs")
    fn_name = item.get("fn") or item.get("name")
    if not isinstance(fn_name, str):
        raise ConfigError(f"{where}: `fn` must name a built-in or 'package.module:function'")
    target = _resolve(fn_name, where)
    kwargs = item.get("kwargs")
    if kwargs is not None:  # a factory: called once with its kwargs, it returns the reward function
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{where}: `kwargs` must be a mapping")
        try:
            target = target(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"{where}: {fn_name}(**kwargs) failed: {exc}") from exc
    elif isinstance(target, type):
        target = target()
    weight = item.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise ConfigError(f"{where}: `weight` must be a number, got {weight!r}")
    return RubricItem(str(item.get("name") or fn_name), target, float(weight))


# ------------------------------------------------------------------------------------ the wrapper

class RubricWrapper(gym.Wrapper):
    """Adds a rubric's weighted components to the last step of every episode.

    `keep_env_reward=True` keeps the env's own components and adds the rubric's (a rubric name that
    clashes with an env component is prefixed `rubric/`); False makes the rubric the whole reward.
    Scores on `terminated` or `truncated` as seen here, so put the turn limit inside (`env_max_turns`).
    """

    def __init__(self, env: gym.Env, rubric: Rubric | Sequence[Any], keep_env_reward: bool = True):
        super().__init__(env)
        self.rubric = Rubric.from_config(rubric)
        self.keep_env_reward = keep_env_reward
        self._task, self._reset_info, self._steps = "", {}, []

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._task, self._reset_info, self._steps = obs, dict(info), []
        return obs, info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps.append(Step(action if isinstance(action, str) else str(action), obs, float(reward), info))
        info = dict(info)
        components = dict(info.get("reward_components") or {}) if self.keep_env_reward else {}
        if not self.keep_env_reward:
            reward = 0.0
        if terminated or truncated:
            episode = Episode(self._task, self.instructions, tuple(self._steps), self._reset_info,
                              bool(info.get("success", False)), bool(truncated and not terminated))
            scored = self.rubric.score(episode)
            for name, value in scored.components.items():
                components[f"rubric/{name}" if name in components else name] = value
            reward = float(reward) + scored.total
            info["rubric_scores"] = scored.raw
            if scored.errors:
                info["rubric_errors"] = scored.errors
        info["reward_components"] = components
        return obs, float(reward), terminated, truncated, info

    @property
    def instructions(self) -> str:
        return getattr(self.env, "instructions", self.env.unwrapped.instructions)

    @property
    def tools(self) -> list:
        return getattr(self.env, "tools", self.env.unwrapped.tools)

    def oracle_action(self) -> str | None:
        oracle = getattr(self.env, "oracle_action", None) or self.env.unwrapped.oracle_action
        return oracle()

    def render(self):
        return self.env.render()

    def snapshot(self) -> bytes:
        """The inner env's snapshot and this episode's record so far (the rubric scores every step of it)."""
        from agentgym.snapshot import snapshot

        return pickle.dumps((snapshot(self.env), self._task, self._reset_info, self._steps),
                            protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, data: bytes) -> None:
        from agentgym.snapshot import restore

        inner, self._task, self._reset_info, steps = pickle.loads(data)
        self._steps = list(steps)
        restore(self.env, inner)


DEMO_RUBRIC = ({"name": "solved", "fn": "success", "weight": 1.0},
               {"name": "answered", "fn": "answered", "weight": 0.1},
               {"name": "turns", "fn": "num_turns", "weight": -0.01})


def make_rubric_env(env: str = "agentgym/Toy-Calculator-v0", rubric: Any = DEMO_RUBRIC,
                    env_kwargs: Mapping[str, Any] | None = None, keep_env_reward: bool = False,
                    env_max_turns: int | None = 4) -> RubricWrapper:
    """Entry point of `agentgym/Rubric-v0`: make `env` (turn limit `env_max_turns`) and wrap it in a rubric.

    With no arguments it is a demo: the calculator toy scored by `DEMO_RUBRIC` instead of its own reward.
    """
    from agentgym.registration import make

    if not isinstance(env, str) or not env:
        raise ConfigError("agentgym/Rubric-v0 needs `env`: the id of the env to put the rubric on")
    rubric = Rubric.from_config(list(rubric) if isinstance(rubric, tuple) else rubric)  # fails before env starts
    inner = make(env, max_turns=env_max_turns, **dict(env_kwargs or {}))
    return RubricWrapper(inner, rubric, keep_env_reward=keep_env_reward)


# ------------------------------------------------------------------------------------ group rewards
# A group scorer sees the G episodes of one task at once (`score_group(episodes) -> list[float]`, raising
# when it cannot score), e.g. `agentgym.tools.judges.GroupJudge`, RULER-style. It runs on finished
# trajectories: the trainer applies `rollout.group_rewards` to each batch before computing advantages.

@dataclass(frozen=True)
class GroupReward:
    """A named, weighted group scorer."""

    name: str
    scorer: Any
    weight: float = 1.0


GROUP_BUILTINS: dict[str, Any] = {"group_judge": "agentgym.tools.judges:GroupJudge"}


def group_rewards_from_config(config: Any) -> tuple[GroupReward, ...]:
    """Group rewards from `[{name, fn, weight, kwargs}]` (fn: `group_judge` or 'package.module:Class')."""
    if not config:
        return ()
    if not isinstance(config, (list, tuple)):
        raise ConfigError("`group_rewards` must be a list like [{name: ruler, fn: group_judge, weight: 1.0, "
                          "kwargs: {model: 'openai:http://127.0.0.1:8000'}}]")
    out = []
    for i, item in enumerate(config):
        if isinstance(item, GroupReward):
            out.append(item)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("fn", "group_judge"), str):
            raise ConfigError(f"group reward {i}: expected a mapping with `fn` (group_judge or 'package.module:Class')")
        unknown = sorted(set(item) - {"name", "fn", "weight", "kwargs"})
        if unknown:
            raise ConfigError(f"group reward {i}: unknown key(s) {unknown}; allowed: name, fn, weight, kwargs")
        fn = item.get("fn", "group_judge")
        target = _resolve(GROUP_BUILTINS.get(fn, fn), f"group reward {i}")
        scorer = target(**dict(item.get("kwargs") or {})) if isinstance(target, type) or item.get("kwargs") \
            else target
        if not hasattr(scorer, "score_group"):
            raise ConfigError(f"group reward {i}: {fn!r} has no score_group(episodes) method")
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ConfigError(f"group reward {i}: `weight` must be a number, got {weight!r}")
        out.append(GroupReward(str(item.get("name") or fn), scorer, float(weight)))
    names = [g.name for g in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"group reward names must be unique, got {names}")
    return tuple(out)


def episode_from_trajectory(traj: Any) -> Episode:
    """The rubric's view of a recorded `Trajectory`: turn k's result is turn k+1's observation (or the final one)."""
    turns = traj.turns
    results = [t.observation for t in turns[1:]] + [traj.final_observation]
    steps = tuple(Step(t.action, obs, t.reward, {"valid_action": t.valid}) for t, obs in zip(turns, results))
    return Episode(traj.first_observation, traj.system_prompt, steps, {"task_id": traj.task_id}, traj.success,
                   bool(turns and turns[-1].truncated))


def _with_group_score(traj: Any, name: str, value: float | None, error: str | None) -> Any:
    from dataclasses import replace

    if not traj.turns:
        return traj
    last = traj.turns[-1]
    if error is not None:
        last = replace(last, info={**last.info, f"{name}_error": error})
    else:
        last = replace(last, reward=last.reward + value, reward_components={**last.reward_components, name: value},
                       info={**last.info, f"{name}_score": value})
    return replace(traj, turns=traj.turns[:-1] + (last,))


def add_group_scores(trajectories: Sequence[Any], scorer: Any, name: str = "judge", weight: float = 1.0,
                     max_workers: int = 4) -> list[Any]:
    """Trajectories (same order) with `weight × score` added to each one's last turn, as component `name`.

    Groups are scored concurrently. A group whose scorer fails is returned unchanged, the reason in its last
    turns' `info[f"{name}_error"]`: a failed judgement scores nothing and never crashes training.
    """
    groups: dict[int, list[int]] = {}
    for i, traj in enumerate(trajectories):
        groups.setdefault(traj.group_id, []).append(i)

    def run(members: list[int]) -> tuple[list[int], list[float] | None, str | None]:
        try:
            scores = [float(s) for s in scorer.score_group([episode_from_trajectory(trajectories[i]) for i in members])]
        except Exception as exc:  # noqa: BLE001 - recorded per trajectory
            return members, None, f"{type(exc).__name__}: {exc}"[:500]
        if len(scores) != len(members) or not all(math.isfinite(s) for s in scores):
            return members, None, f"the scorer gave {len(scores)} finite scores for {len(members)} trajectories"
        return members, scores, None

    out = list(trajectories)
    if not groups:
        return out
    with ThreadPoolExecutor(max(1, min(max_workers, len(groups)))) as pool:
        for members, scores, error in pool.map(run, groups.values()):
            for j, i in enumerate(members):
                value = None if scores is None else weight * scores[j]
                out[i] = _with_group_score(trajectories[i], name, value, error)
    return out


def apply_group_rewards(trajectories: Sequence[Any], rewards: Sequence[GroupReward]) -> list[Any]:
    out = list(trajectories)
    for reward in rewards:
        out = add_group_scores(out, reward.scorer, reward.name, reward.weight)
    return out
