"""The bug synthesiser: plant AST mutations in a Python repository and keep those its own tests catch.

For each candidate mutation (see `mutate.py`) the repository's whole pytest suite runs in a sandbox;
the mutation becomes a task only if at least one test that passed before now fails and every other one
still passes (no collection error, no timeout). The failing tests are FAIL_TO_PASS, the rest
PASS_TO_PASS, and the issue text is written from the failing tests' names and assertion messages
(never from the mutated code).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from agentgym.envs.swe.mutate import Mutation, find_mutations, interleave_by_kind
from agentgym.envs.swe.tasks import SWETask, make_diff
from agentgym.envs.swe.testing import TestRun, run_pytest
from agentgym.errors import ConfigError
from agentgym.tools.sandbox import SandboxError, make_sandbox

SKIP_DIRS = {"tests", "test", "testing", "docs", "doc", "examples", "build", "dist", ".git", ".tox", "venv", ".venv",
             "benchmarks", "__pycache__"}


@dataclass(frozen=True)
class SynthReport:
    """What a synthesis run did: tasks kept, candidates tried, and why the others were dropped."""

    tasks: tuple[SWETask, ...]
    tried: int
    rejected: dict[str, int]
    baseline_passed: int
    seconds: float


def source_files(repo_dir: str) -> list[str]:
    """Library source files (relative paths): .py files outside test/doc folders, not tests themselves."""
    found = []
    for dirpath, dirnames, filenames in os.walk(repo_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py") or name in ("setup.py", "conftest.py", "noxfile.py") or \
                    name.startswith("test_") or name.endswith("_test.py"):
                continue
            found.append(os.path.relpath(os.path.join(dirpath, name), repo_dir))
    return found


def problem_statement(repo: str, run: TestRun, failing: list[str]) -> str:
    """Issue text from the failing tests: their ids and the `E` lines pytest printed for them."""
    errors = [_cut(line.strip()[1:].strip(), 200) for line in run.output.splitlines() if line.startswith("E ")]
    shown = failing[:6]
    text = [f"Some of {repo}'s tests fail since a recent change to the library code:", ""]
    text += [f"  - {t}" for t in shown]
    if len(failing) > len(shown):
        text.append(f"  - ... and {len(failing) - len(shown)} more")
    if errors:
        text += ["", "The failures report:", *[f"    {e}" for e in errors[:12]]]
    text += ["", "Find the bug in the library code and fix it so these tests pass again without breaking "
             "the others. Do not change the tests."]
    return "\n".join(text)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def synthesize(repo_dir: str, repo: str | None = None, backend: str = "auto", max_tasks: int = 20,
               max_candidates: int = 200, seed: int = 0, timeout_s: float | None = None,
               files: list[str] | None = None, progress: Callable[[str], None] | None = None) -> SynthReport:
    """Make up to `max_tasks` validated bug tasks from a local repository with a pytest suite."""
    repo_dir = os.path.abspath(repo_dir)
    repo = repo or os.path.basename(repo_dir.rstrip("/"))
    files = files or source_files(repo_dir)
    if not files:
        raise ConfigError(f"no Python source files found in {repo_dir!r} (outside test and doc folders)")
    say = progress or (lambda _: None)
    start = time.perf_counter()
    sandbox = make_sandbox(backend)
    try:
        sandbox.copy_in(repo_dir)
        t0 = time.perf_counter()
        baseline = run_pytest(sandbox, timeout_s=timeout_s or 600)
        took = time.perf_counter() - t0
        passed = sorted(t for t, s in baseline.statuses.items() if s == "PASSED")
        if not passed:
            raise ConfigError(f"no test of {repo_dir!r} passes before any change (pytest said: "
                              f"{baseline.output.strip()[-300:]!r}); the synthesiser needs a passing pytest suite")
        limit = timeout_s or max(10.0, 3 * took + 5)  # mutations that loop forever cost this much each
        say(f"{repo}: {len(passed)} tests pass in {took:.1f} s; trying mutations of {len(files)} files")
        originals = {f: open(os.path.join(repo_dir, f), encoding="utf-8").read() for f in files}
        candidates = interleave_by_kind([m for f in files for m in find_mutations(f, originals[f], seed)], seed)
        tasks: list[SWETask] = []
        rejected: dict[str, int] = {}
        tried = 0
        for mutation in candidates[:max_candidates]:
            if len(tasks) >= max_tasks:
                break
            tried += 1
            verdict = _try(sandbox, mutation, originals[mutation.path], passed, limit)
            if isinstance(verdict, str):
                rejected[verdict] = rejected.get(verdict, 0) + 1
                continue
            run, failing = verdict
            task = _task(repo, repo_dir, mutation, originals[mutation.path], run, failing, passed, len(tasks))
            tasks.append(task)
            say(f"  kept {task.instance_id}: {mutation.description} ({len(failing)} failing)")
        return SynthReport(tuple(tasks), tried, rejected, len(passed), time.perf_counter() - start)
    finally:
        sandbox.close()


def _try(sandbox, mutation: Mutation, original: str, passed: list[str], limit: float):
    """(run, failing tests) if the mutation makes a valid task, else the reason it does not."""
    sandbox.write_file(mutation.path, mutation.apply(original))
    try:
        run = run_pytest(sandbox, timeout_s=limit)
    except SandboxError:
        return "sandbox error"
    finally:
        sandbox.write_file(mutation.path, original)
    if run.exec_result.timed_out:
        return "timeout"
    if run.collection_error:
        return "collection error"
    failing = [t for t in passed if not run.passed(t)]
    if not failing:
        return "no test fails"
    if len(failing) == len(passed):
        return "every test fails"
    return run, failing


def _task(repo: str, repo_dir: str, mutation: Mutation, original: str, run: TestRun, failing: list[str],
          passed: list[str], index: int) -> SWETask:
    buggy = mutation.apply(original)
    stem = os.path.splitext(mutation.path)[0].replace(os.sep, ".")
    return SWETask(instance_id=f"{repo}__{stem}-{mutation.kind}-L{mutation.line}-{index}", repo=repo,
                   base_dir=repo_dir, problem_statement=problem_statement(repo, run, failing),
                   patch=make_diff(mutation.path, buggy, original), fail_to_pass=tuple(failing),
                   pass_to_pass=tuple(t for t in passed if t not in failing),
                   bug_patch=make_diff(mutation.path, original, buggy),
                   source=f"synth:{mutation.kind}", extra={"mutation": mutation.description})
