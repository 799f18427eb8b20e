"""The bug synthesiser: plant AST mutations in a Python repository and keep those its own tests catch.

For each candidate mutation (see `mutate.py`) the repository's whole pytest suite runs in a sandbox;
the mutation becomes a task only if at least one test that passed before now fails and every other one
still passes (no collection error, no timeout). The failing tests are FAIL_TO_PASS, the rest
PASS_TO_PASS, and the issue text is written from the failing tests' names and assertion messages
(never from the mutated code).
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
from dataclasses import dataclass
from typing import Callable

from agentgym.envs.swe.deps import DepsFolder
from agentgym.envs.swe.mutate import Mutation, find_mutations, interleave_by_kind
from agentgym.envs.swe.oracle import plan_edits
from agentgym.envs.swe.tasks import SWETask, make_diff
from agentgym.envs.swe.testing import TestRun, run_pytest
from agentgym.errors import ConfigError
from agentgym.tools.sandbox import SandboxError, make_sandbox

MAX_FILE_MB = 20.0  # a repository file larger than this is refused (sandboxes hold a few hundred MB)
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
    """Issue text from the failing tests: their ids and the `E` lines pytest printed for them (not for others)."""
    errors = [_cut(e, 200) for e in failure_messages(run.output, failing)]
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


_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$")


def failure_messages(output: str, failing: list[str]) -> list[str]:
    """The `E` lines of the failure sections (`____ name ____`) that belong to the failing tests."""
    names = {".".join(t.split("::")[1:]) for t in failing}
    messages, current = [], None
    for line in output.splitlines():
        section = _SECTION.match(line)
        if section:
            current = section.group(1).strip()
        elif line.startswith("E ") and current in names:
            messages.append(line[1:].strip())
    return messages


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def synthesize(repo_dir: str, repo: str | None = None, backend: str = "auto", max_tasks: int = 20,
               max_candidates: int = 200, seed: int = 0, timeout_s: float | None = None,
               files: list[str] | None = None, progress: Callable[[str], None] | None = None,
               deps: DepsFolder | None = None) -> SynthReport:
    """Make up to `max_tasks` validated bug tasks from a local repository with a pytest suite.

    `deps`: the tests' requirements folder (`install_requirements`), mounted in the sandbox. Bad repositories
    (no tests, a suite that fails or hangs, huge files) raise ConfigError with a one-line reason.
    """
    repo_dir = os.path.abspath(repo_dir)
    repo = repo or os.path.basename(repo_dir.rstrip("/"))
    check_repository(repo_dir)
    files = files or source_files(repo_dir)
    if not files:
        raise ConfigError(f"no Python source files found in {repo_dir!r} (outside test and doc folders)")
    say = progress or (lambda _: None)
    start = time.perf_counter()
    plugins = deps.plugins if deps else ()
    sandbox = make_sandbox(backend, deps_dir=deps.path if deps else None)
    try:
        sandbox.copy_in(repo_dir)
        t0 = time.perf_counter()
        baseline = run_pytest(sandbox, timeout_s=timeout_s or 600, plugins=plugins)
        took = time.perf_counter() - t0
        library = set(files)  # doctests of library modules are not tests of them: grading restores test files
        passed = sorted(t for t, s in baseline.statuses.items() if s == "PASSED" and t.split("::")[0] not in library)
        if not passed:
            raise ConfigError(baseline_problem(repo_dir, baseline, timeout_s or 600, deps))
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
            original = originals[mutation.path]
            if plan_edits(mutation.path, mutation.apply(original), original) is None:
                verdict: str | tuple = "fix too long for the oracle's action limit"
            else:
                verdict = _try(sandbox, mutation, original, passed, limit, plugins)
            if isinstance(verdict, str):
                rejected[verdict] = rejected.get(verdict, 0) + 1
                continue
            run, failing = verdict
            task = _task(repo, repo_dir, mutation, original, run, failing, passed, len(tasks))
            tasks.append(dataclasses.replace(task, deps_dir=deps.path) if deps else task)
            say(f"  kept {task.instance_id}: {mutation.description} ({len(failing)} failing)")
        return SynthReport(tuple(tasks), tried, rejected, len(passed), time.perf_counter() - start)
    finally:
        sandbox.close()


def check_repository(repo_dir: str, max_file_mb: float = MAX_FILE_MB) -> None:
    """ConfigError (one line) for a repository no sandbox should take: not a folder, or holding a huge file."""
    if not os.path.isdir(repo_dir):
        raise ConfigError(f"{repo_dir!r} is not a directory; give the path of a Python repository")
    for dirpath, dirnames, filenames in os.walk(repo_dir):
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__", ".pytest_cache")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            size = os.path.getsize(path) if os.path.isfile(path) and not os.path.islink(path) else 0
            if size > max_file_mb * 2**20:
                raise ConfigError(f"{os.path.relpath(path, repo_dir)} is {size / 2**20:.1f} MB, over the "
                                  f"{max_file_mb:g} MB a sandboxed file may have; remove it (data, an archive?) "
                                  "from a copy of the repository and run again")


def baseline_problem(repo_dir: str, run: TestRun, timeout_s: float, deps: DepsFolder | None) -> str:
    """Why no test passes before any change, in one line that says what to do."""
    lines = [x.strip() for x in run.output.strip().splitlines() if x.strip()]
    last = _cut(lines[-1], 160) if lines else "no output"
    if run.exec_result.timed_out:
        return (f"the test suite of {repo_dir!r} did not finish in {timeout_s:g} s (a test hangs?); make it finish "
                "or give a larger --timeout")
    if run.exec_result.exit_code == 5 or "no tests ran" in last:
        return f"pytest found no tests in {repo_dir!r} ({last}); the synthesiser needs a pytest suite"
    missing = re.search(r"No module named '([^']+)'", run.output)
    if missing:
        have = f"; the test requirements could not supply it (unsatisfied: {', '.join(deps.unsatisfied) or 'none'})" \
            if deps else "; declare it in the repository's test requirements (pyproject extras, requirements-test.txt)"
        return f"no test of {repo_dir!r} passes before any change: module {missing.group(1)!r} is missing{have}"
    return (f"no test of {repo_dir!r} passes before any change (pytest: {last!r}); the synthesiser needs a suite "
            "whose tests pass")


def _try(sandbox, mutation: Mutation, original: str, passed: list[str], limit: float, plugins: tuple[str, ...]):
    """(run, failing tests) if the mutation makes a valid task, else the reason it does not."""
    sandbox.write_file(mutation.path, mutation.apply(original))
    try:
        run = run_pytest(sandbox, timeout_s=limit, plugins=plugins)
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
