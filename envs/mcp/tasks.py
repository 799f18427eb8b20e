"""Tasks of the generic MCP env and the checkers that grade their answers.

A task is a mapping:

    id: capital-france              # optional; defaults to its position
    question: What is the capital of France? Use the tools.
    answer: Paris                   # a reference answer (or a list of accepted answers) ...
    checker: normalized             # ... compared by a checker: exact | normalized | contains | number | regex
                                    #     | package.module:function  (fn(answer, task) -> bool or score in [0, 1])
    split: train                    # optional; with splits, reset(options={"split": ...}) picks among them
    oracle:                         # optional: actions that solve it, one per turn (the oracle policy plays them)
      - {tool: capital, arguments: {country: France}}
      - "<answer>Paris</answer>"

Tasks come inline (a list) or from a YAML / JSON / JSONL file (a list, or a mapping with `tasks:`).
"""
from __future__ import annotations

import importlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agentgym.errors import ConfigError
from agentgym.rubric import normalize_answer

_TASK_KEYS = {"id", "question", "answer", "checker", "split", "oracle", "metadata"}


@dataclass(frozen=True)
class MCPTask:
    """One question for the agent, and how its answer is graded."""

    id: str
    question: str
    answers: tuple[str, ...] = ()          # accepted reference answers (may be empty with a custom checker)
    checker: str = "normalized"
    split: str | None = None
    oracle: tuple[str | tuple[str, dict[str, Any]], ...] = ()  # actions as written, or (tool, arguments) calls
    metadata: dict[str, Any] = field(default_factory=dict)


def _oracle_action(step: Any, where: str) -> str | tuple[str, dict[str, Any]]:
    """A step as written, or a `(tool, arguments)` call the env writes in the model's format when it plays it."""
    if isinstance(step, str):
        return step
    if isinstance(step, dict) and isinstance(step.get("tool"), str) and isinstance(step.get("arguments") or {}, dict):
        return step["tool"], dict(step.get("arguments") or {})
    raise ConfigError(f"{where}: each oracle step is an action string or {{tool: NAME, arguments: {{...}}}}")


def parse_task(item: Any, index: int, default_checker: str) -> MCPTask:
    where = f"MCP task {index}"
    if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
        raise ConfigError(f"{where}: expected a mapping with a non-empty `question` (and `answer` or `checker`)")
    unknown = sorted(set(item) - _TASK_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {', '.join(sorted(_TASK_KEYS))}")
    answer = item.get("answer")
    answers = tuple(str(a) for a in answer) if isinstance(answer, (list, tuple)) else \
        (() if answer is None else (str(answer),))
    checker = str(item.get("checker") or default_checker)
    if not answers and checker in BUILTIN_CHECKERS:
        raise ConfigError(f"{where}: give a reference `answer`, or a custom `checker` ('package.module:function')")
    get_checker(checker)  # fails now, naming the task, rather than at the first answer
    oracle = item.get("oracle") or ()
    if not isinstance(oracle, (list, tuple)):
        raise ConfigError(f"{where}: `oracle` must be a list of actions")
    split = item.get("split")
    return MCPTask(str(item.get("id", index)), item["question"].strip(), answers, checker,
                   None if split is None else str(split),
                   tuple(_oracle_action(s, where) for s in oracle), dict(item.get("metadata") or {}))


def load_tasks(tasks: Any, default_checker: str = "normalized", base_dir: Path | None = None) -> tuple[MCPTask, ...]:
    """Tasks from an inline list or a file path (relative paths resolve against `base_dir`)."""
    if isinstance(tasks, (str, Path)):
        path = Path(tasks)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        tasks = read_task_file(path)
    if not isinstance(tasks, (list, tuple)) or not tasks:
        raise ConfigError("`tasks` must be a non-empty list of {question, answer} mappings or a YAML/JSON/JSONL file")
    parsed = tuple(parse_task(t, i, default_checker) for i, t in enumerate(tasks))
    ids = [t.id for t in parsed]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"MCP task ids must be unique; {dupes} appear more than once")
    return parsed


def read_task_file(path: Path) -> list[Any]:
    if not path.is_file():
        raise ConfigError(f"task file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is the same one-line message
        raise ConfigError(f"task file {str(path)!r} cannot be parsed: {str(exc).splitlines()[0]}") from exc
    if isinstance(data, dict):
        data = data.get("tasks")
    if not isinstance(data, list):
        raise ConfigError(f"task file {str(path)!r} must hold a list of tasks (or a mapping with `tasks:`)")
    return data


# ------------------------------------------------------------------------------------ checkers
# A checker takes (answer, task) and returns a score in [0, 1]; 1 means solved.

def check_exact(answer: str, task: MCPTask) -> float:
    return float(answer.strip() in task.answers)


def check_normalized(answer: str, task: MCPTask) -> float:
    return float(normalize_answer(answer) in {normalize_answer(a) for a in task.answers})


def check_contains(answer: str, task: MCPTask) -> float:
    got = normalize_answer(answer)
    return float(any(normalize_answer(a) in got for a in task.answers))


def check_number(answer: str, task: MCPTask) -> float:
    """Numerically equal to a reference (relative tolerance 1e-6); the first number in the answer counts."""
    match = re.search(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", answer.replace(",", ""))
    if not match:
        return 0.0
    value = float(match.group())
    for ref in task.answers:
        try:
            if math.isclose(value, float(ref.replace(",", "")), rel_tol=1e-6, abs_tol=1e-9):
                return 1.0
        except ValueError:
            continue
    return 0.0


def check_regex(answer: str, task: MCPTask) -> float:
    """The reference answers are regular expressions; one must match the whole stripped answer."""
    return float(any(re.fullmatch(a, answer.strip(), flags=re.I | re.S) for a in task.answers))


BUILTIN_CHECKERS: dict[str, Callable[[str, MCPTask], float]] = {
    "exact": check_exact, "normalized": check_normalized, "contains": check_contains, "number": check_number,
    "regex": check_regex}


def get_checker(name: str) -> Callable[[str, MCPTask], Any]:
    if name in BUILTIN_CHECKERS:
        return BUILTIN_CHECKERS[name]
    module, _, attr = name.partition(":")
    if not attr:
        raise ConfigError(f"unknown checker {name!r}; use {', '.join(BUILTIN_CHECKERS)} or 'package.module:function'")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"checker {name!r} cannot be imported: {exc}") from exc
    if not callable(fn):
        raise ConfigError(f"checker {name!r} is not callable")
    return fn


def grade(answer: str, task: MCPTask) -> tuple[float, str | None]:
    """(score in [0, 1], error): a custom checker that raises or returns garbage scores 0 with the reason."""
    try:
        value = get_checker(task.checker)(answer, task)
        score = float(value)
    except Exception as exc:  # noqa: BLE001 - a user's checker must not crash the episode
        return 0.0, f"checker {task.checker!r} failed: {type(exc).__name__}: {exc}"
    if not math.isfinite(score):
        return 0.0, f"checker {task.checker!r} returned {value!r}"
    return min(1.0, max(0.0, score)), None
