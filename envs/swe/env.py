"""`SWEEnv`: fix a bug in a real repository inside a sandbox, graded by the repository's own tests.

Tools: bash, view_file, str_replace, create_file, run_tests, submit. Reward components:
- `progress`: `progress_weight` x (FAIL_TO_PASS tests passing for the first time this episode) / |FAIL_TO_PASS|,
  measured whenever an action changed the workspace;
- `outcome`: 1 on `submit` when every FAIL_TO_PASS test passes and every PASS_TO_PASS test still does.
Grading writes the task's test files (with any hidden `test_patch`) over the workspace, runs them, and
puts the agent's versions back, so editing tests never helps and hidden tests stay hidden.
The anchor is a hash of the workspace files, so GiGPO groups equal repository states across rollouts.
A sandbox that dies mid-episode ends that episode as a failure (`info["failure"]`), never the process.
"""
from __future__ import annotations

import shlex
from collections import OrderedDict
from typing import Any

from agentgym.core import ToolEnv, make_info
from agentgym.envs.swe.deps import SANDBOX_PYTHON, check_sandbox_python, load_deps_folder
from agentgym.envs.swe.oracle import apply_call, next_edit
from agentgym.envs.swe.sources import resolve_tasks
from agentgym.envs.swe.state import last_test_line, workspace_summary
from agentgym.envs.swe.summary import summarize_files
from agentgym.envs.swe.tasks import SWETask, apply_diff, diff_paths, read_tree
from agentgym.envs.swe.testing import TestRun, run_pytest, summarize
from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.toolcalls import Tool, ToolResult, tool
from agentgym.tools.sandbox import (SandboxError, SandboxFrozen, SandboxLimits, SandboxUnavailable, pick_backend,
                                    sandbox_pool)

HASH_SCRIPT = r"""import hashlib, os, stat
h, code = hashlib.sha256(), hashlib.sha256()
CONFIG = ('pytest.ini', 'setup.cfg', 'tox.ini', 'pyproject.toml')
for d, ds, fs in os.walk('.'):
    ds[:] = sorted(x for x in ds if x not in ('__pycache__', '.pytest_cache', '.git'))
    for f in sorted(fs):
        p = os.path.join(d, f)
        st = os.lstat(p)
        part = p.encode('utf-8', 'surrogateescape') + b'\0'
        if stat.S_ISREG(st.st_mode):
            with open(p, 'rb') as fh:
                part += fh.read()
        elif stat.S_ISLNK(st.st_mode):
            part += b'->' + os.readlink(p).encode('utf-8', 'surrogateescape')
        h.update(part)
        if f.endswith(('.py', '.pyi')) or f in CONFIG:
            code.update(part)
print(h.hexdigest()[:20], code.hexdigest()[:20])"""
MUTATING_TOOLS = ("bash", "str_replace", "create_file")  # a failed bash may still have written files
# (back end, image, deps folder) whose sandbox python3 was found to match the folder's (this process checks once)
_PYTHON_CHECKED: set[tuple[str, str | None, str]] = set()
GRADE_CACHE_SIZE = 256  # gradings kept per env instance, keyed by (task, hash of every workspace file)

INSTRUCTIONS = """You are a software engineer fixing a bug in the Python repository at /workspace.
Work with the tools: `bash` runs a shell command in /workspace (no network), `view_file` shows a file with line
numbers, `str_replace` replaces one exact occurrence of a text in a file, `create_file` writes a whole file,
`run_tests` runs pytest (the failing tests by default), and `submit` ends the episode for grading.
Fix the library code, not the tests: test files are restored to their original versions when grading.
"""  # + ToolEnv.call_hint(): how to call a tool in the model's own format


# The first observation's budget in characters: the byte-level chat of scripted policies counts one token per
# byte, so with the instructions and tool schemas (~3.5k) and the oracle's edits it fits the default eval's
# 8,192-token context; a BPE tokenizer needs about a quarter as many tokens.
FIRST_OBSERVATION_CHARS = 3000
ISSUE_SHARE = 0.6  # at most this much of it for the issue (failing tests and messages); the rest lists files


def first_observation(task: SWETask, files: list[str], budget: int) -> str:
    """Repository name, the issue (failing tests and their messages kept), a file summary: <= `budget` chars."""
    head = f"Repository: {task.repo or task.instance_id} (at /workspace)\n\nIssue:\n"
    issue = _clip(task.problem_statement.strip(), int(budget * ISSUE_SHARE) - len(head))
    files_head = "\n\nFiles (a summary; list more with bash, e.g. `ls src` or `find . -name '*.py'`):\n"
    room = budget - len(head) - len(issue) - len(files_head)
    return head + issue + files_head + summarize_files(files, budget=room)


class SWEEnv(ToolEnv):
    """A bug-fix task per episode, in a Docker or bubblewrap sandbox (see the module docstring)."""

    tool_timeout_s = 900.0  # the sandbox enforces each command's own limit; this only guards a hung back end
    max_calls_per_turn = 6
    final_tools = ("submit",)

    def __init__(self, tasks: str = "mini", backend: str = "auto", image: str | None = None,
                 bash_timeout_s: float = 30.0, test_timeout_s: float = 120.0, progress_weight: float = 0.5,
                 pool_size: int = 2, memory_mb: int = 1024, pids: int = 256, disk_mb: int = 256,
                 max_observation_chars: int = 8000, first_observation_chars: int = FIRST_OBSERVATION_CHARS):
        super().__init__()
        if progress_weight < 0 or bash_timeout_s <= 0 or test_timeout_s <= 0:
            raise ConfigError("progress_weight must be >= 0 and the timeouts > 0")
        if first_observation_chars < 800:
            raise ConfigError(f"first_observation_chars must be >= 800 (the issue and a file summary), "
                              f"got {first_observation_chars}")
        try:
            self.backend = pick_backend(backend, image)
        except SandboxUnavailable as exc:  # `agentgym check` reports this as a skip with its reason
            raise MissingDependencyError(str(exc)) from exc
        self.tasks_spec, self.image = tasks, image
        self.tasks = resolve_tasks(tasks, self.backend)
        if not self.tasks:
            raise ConfigError(f"the task source {tasks!r} has no tasks")
        missing = sorted({t.deps_dir for t in self.tasks if t.deps_dir and load_deps_folder(t.deps_dir) is None})
        if missing:
            raise ConfigError(f"the test requirements folder {missing[0]!r} is missing; make the tasks again with "
                              "`agentgym swe make-tasks` (or `agentgym swe prepare`), which installs it")
        self.bash_timeout_s, self.test_timeout_s = bash_timeout_s, test_timeout_s
        self.progress_weight, self.max_obs = progress_weight, max_observation_chars
        self.first_obs_chars = first_observation_chars
        self.limits = SandboxLimits(memory_mb=memory_mb, pids=pids, disk_mb=disk_mb)
        self.pool_size = pool_size
        self.sandbox: Any = None
        self.task: SWETask | None = None
        self._plugins: tuple[str, ...] = ()
        self._failure: str | None = None
        self._fix: dict[str, str | None] = {}
        self._grading: dict[str, str | None] = {}
        self._passed_ever: set[str] = set()
        self._graded_hash: str | None = None   # the code hash (.py and test config) the last grading saw
        self._hash: str | None = None          # hash of every workspace file: the anchor
        self._code_hash: str | None = None
        self._submitted = False
        self._start_files: dict[str, str] = {}  # the files the task touches, as the episode started (state_summary)
        self._edited: set[str] = set()          # files the agent edited with str_replace / create_file
        self._last_tests = ""                   # the last test run's summary line
        # (task, workspace hash) -> its grading. Group members and replays often reach the same files; a grading
        # is a pytest run in the sandbox (1-2 s). Not used after a bash call: bash can change the sandbox
        # outside /workspace (installed packages, say), which the hash does not see.
        self._grades: OrderedDict[tuple[str, str], TestRun] = OrderedDict()
        self._bash_used = False

    # ------------------------------------------------------------------ tasks and sandboxes
    @property
    def instructions(self) -> str:
        return INSTRUCTIONS + self.call_hint()

    def tool_list(self) -> list[Tool]:
        return [self.bash, self.view_file, self.str_replace, self.create_file, self.run_tests, self.submit]

    def _pick(self, seed: int | None, options: dict[str, Any]) -> SWETask:
        if options.get("task_id"):
            by_id = {t.instance_id: t for t in self.tasks}
            if options["task_id"] not in by_id:
                raise ConfigError(f"no task {options['task_id']!r}; known: {', '.join(list(by_id)[:5])}, ...")
            return by_id[options["task_id"]]
        split = options.get("split")
        pool = [t for t in self.tasks if t.split == split] if split in ("train", "test") else []
        pool = pool or self.tasks
        return pool[int(self.np_random.integers(len(pool)))]

    def _pool(self, task: SWETask):
        image = task.image or self.image
        return sandbox_pool(self.backend, image if self.backend == "docker" else None, self.limits, self.pool_size,
                            deps_dir=task.deps_dir or None)

    def _release(self) -> None:
        if self.sandbox is not None and self.task is not None:
            try:
                self._pool(self.task).release(self.sandbox)
            except Exception:
                pass
        self.sandbox = None

    def _prepare(self, task: SWETask) -> None:
        """A fresh sandbox holding the buggy workspace; the fix and grading files computed host-side."""
        self.sandbox = self._pool(task).acquire()
        if task.deps_dir:
            self._check_python(task)
        if task.image:
            self.sandbox.exec(f"cp -a {shlex.quote(task.image_repo_dir)}/. /workspace/", timeout_s=120)
        else:
            self.sandbox.copy_in(task.base_dir)
        needed = set(diff_paths(task.bug_patch)) | set(diff_paths(task.patch)) | set(diff_paths(task.test_patch)) | \
            set(task.test_files)
        base = read_tree(task.base_dir, needed) if task.base_dir else self._read_tree(needed)
        buggy = {**base, **apply_diff(base, task.bug_patch)} if task.bug_patch else dict(base)
        for path, text in (apply_diff(base, task.bug_patch) if task.bug_patch else {}).items():
            self._write(path, text)
        self._fix = apply_diff({k: v for k, v in buggy.items() if v is not None}, task.patch)
        hidden = apply_diff({k: v for k, v in buggy.items() if v is not None}, task.test_patch)
        fixed_paths = set(diff_paths(task.patch))  # a doctest id in a library file: never write its buggy version
        self._grading = {p: buggy.get(p) for p in task.test_files if buggy.get(p) is not None and p not in fixed_paths}
        self._grading.update(hidden)
        self._start_files = {p: t for p, t in buggy.items() if t is not None}
        self._edited, self._last_tests = set(), ""

    def _check_python(self, task: SWETask) -> None:
        """The sandbox's python3 is the one the task's requirements were installed for (once per pool)."""
        key = (self.backend, task.image or self.image, task.deps_dir)
        if key in _PYTHON_CHECKED:
            return
        deps = load_deps_folder(task.deps_dir)
        if deps is not None:
            found = self.sandbox.exec(SANDBOX_PYTHON, timeout_s=60)
            try:
                check_sandbox_python(deps, found.output if found.exit_code == 0 else "")
            except ConfigError:
                self._release()
                raise
        _PYTHON_CHECKED.add(key)

    def _read_tree(self, paths: set[str]) -> dict[str, str]:
        """Files as the sandbox holds them (for repositories that live in an image, not on the host)."""
        found = {}
        for path in sorted(paths):
            try:
                found[path] = self.sandbox.read_file(path).decode("utf-8", "surrogateescape")
            except SandboxError as exc:
                if "no such file" not in str(exc):
                    raise
        return found

    def _write(self, path: str, text: str | None) -> None:
        if text is None:
            self.sandbox.exec(f"rm -f -- {shlex.quote(path)}", timeout_s=30)
        else:
            self.sandbox.write_file(path, text)

    def reset_task(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._release()
        self.task = task = self._pick(seed, options)
        deps = load_deps_folder(task.deps_dir) if task.deps_dir else None
        self._plugins = deps.plugins if deps else ()
        self._failure, self._submitted, self._bash_used = None, False, False
        self._passed_ever, self._graded_hash = set(), None
        for attempt in range(2):  # one retry with a fresh sandbox: a pool container may have been killed
            try:
                self._prepare(task)
                files = self.sandbox.list_files()
                self._hash, self._code_hash = self._workspace_hash()
                self._graded_hash = self._code_hash
                break
            except SandboxError as exc:
                self._release()
                self._failure = f"sandbox: {exc}"
        else:
            obs = f"The sandbox could not be started ({self._failure}); this episode cannot run."
            return obs, make_info(task_id=task.instance_id, anchor=f"failed:{task.instance_id}",
                                  failure=self._failure)
        self._failure = None
        obs = first_observation(task, files, self.first_obs_chars)
        return obs, make_info(task_id=task.instance_id, anchor=self._hash, task=obs)

    # ------------------------------------------------------------------ grading
    def _workspace_hash(self) -> tuple[str, str]:
        """(hash of every file, hash of the code and test config only): the anchor, and when to grade."""
        result = self.sandbox.exec(f"python3 -c {shlex.quote(HASH_SCRIPT)}", timeout_s=60)
        parts = result.output.split()
        if result.exit_code != 0 or len(parts) != 2:
            raise SandboxError(f"hashing the workspace failed: {result.output.strip()[-200:]}")
        return parts[0], parts[1]

    def _grade(self) -> TestRun:
        """Run the task's tests with the grading versions of the test files, then restore the agent's."""
        assert self.task is not None
        saved: dict[str, str | None] = {}
        for path in self._grading:
            try:
                saved[path] = self.sandbox.read_file(path).decode("utf-8", "surrogateescape")
            except SandboxError:
                saved[path] = None
        try:
            for path, text in self._grading.items():
                if saved[path] != text:  # usually equal: the agent left the tests alone (one exec saved each)
                    self._write(path, text)
            return run_pytest(self.sandbox, self.task.test_files, timeout_s=self.test_timeout_s, plugins=self._plugins)
        finally:
            for path, text in saved.items():
                if text != self._grading[path]:
                    self._write(path, text)

    def _cached_grade(self) -> TestRun:
        """`_grade`, or the grading of the same task with the same workspace files from earlier (a run that
        timed out is not kept: the sandbox may only have been slow)."""
        assert self.task is not None and self._hash is not None
        if self._bash_used:
            return self._grade()
        key = (self.task.instance_id, self._hash)
        if key in self._grades:
            self._grades.move_to_end(key)
            return self._grades[key]
        run = self._grade()
        if not run.exec_result.timed_out:
            self._grades[key] = run
            if len(self._grades) > GRADE_CACHE_SIZE:
                self._grades.popitem(last=False)
        return run

    def _resolved(self, run: TestRun) -> tuple[bool, list[str]]:
        assert self.task is not None
        newly = [t for t in self.task.fail_to_pass if run.passed(t) and t not in self._passed_ever]
        self._passed_ever.update(newly)
        # A test this sandbox skips (a module one back end lacks: six's moved-module tests without tkinter in the
        # Docker image) cannot be checked here: every other FAIL_TO_PASS test must pass, and at least one must run.
        ok = all(run.not_broken(t) for t in (*self.task.fail_to_pass, *self.task.pass_to_pass)) and \
            any(run.passed(t) for t in self.task.fail_to_pass)
        return ok and not run.exec_result.timed_out, newly

    # ------------------------------------------------------------------ tools
    def _guard(self) -> None:
        if self._failure:
            raise RuntimeError(f"the sandbox failed earlier ({self._failure}); reset the env")
        if self.sandbox is None:
            raise RuntimeError("call reset() first")

    def _sandboxed(self, fn):
        self._guard()
        try:
            return fn()
        except SandboxError as exc:
            if self.sandbox is None or not self.sandbox.alive() or isinstance(exc, SandboxFrozen):
                self._failure = f"sandbox: {exc}"
            raise

    @tool
    def bash(self, command: str, timeout: float = 30) -> str:
        """Run a bash command in /workspace and return its output and exit code.

        Args:
            command: The shell command, e.g. `grep -rn "def merge" .` or `python3 -c "..."`.
            timeout: Seconds before the command and everything it started are killed (at most 120).
        """
        limit = min(max(float(timeout), 1.0), max(self.bash_timeout_s, 120.0))
        self._bash_used = True
        result = self._sandboxed(lambda: self.sandbox.exec(command, timeout_s=limit))
        return _clip(result.describe(limit), self.max_obs)

    @tool
    def view_file(self, path: str, start_line: int = 1, end_line: int = 0) -> str:
        """Show a file with line numbers (or list a directory).

        Args:
            path: File path relative to /workspace.
            start_line: First line to show (1-based).
            end_line: Last line to show; 0 shows to the end.
        """
        def view() -> str:
            try:
                raw = self.sandbox.read_file(path)
            except SandboxError as exc:
                if "directory" in str(exc):
                    return "\n".join(self.sandbox.list_files(path)) or "[empty directory]"
                raise ValueError(str(exc)) from None
            lines = raw.decode("utf-8", "replace").splitlines()
            stop = len(lines) if end_line <= 0 else min(end_line, len(lines))
            first = max(1, start_line)
            body = "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(first, stop + 1))
            return _clip(body or f"[{path} has {len(lines)} lines]", self.max_obs)
        return self._sandboxed(view)

    @tool
    def str_replace(self, path: str, old_str: str, new_str: str, line: int = 0) -> str:
        """Replace one occurrence of `old_str` in a file with `new_str`.

        Args:
            path: File path relative to /workspace.
            old_str: Exact text to replace; it must occur once, or once starting on `line`.
            new_str: The replacement text.
            line: Where `old_str` occurs more than once: the line (1-based) its occurrence starts on.
        """
        def edit() -> str:
            try:
                text = self.sandbox.read_file(path).decode("utf-8", "surrogateescape")
            except SandboxError as exc:
                raise ValueError(str(exc)) from None
            try:
                edited = apply_call(text, {"arguments": {"old_str": old_str, "new_str": new_str, "line": line}})
            except ValueError as exc:
                where = f" starting on line {line}" if line else ""
                raise ValueError(f"{exc}{where} in {path}; it must occur exactly once (view the file and copy the "
                                 "exact text, with more context or the `line` it starts on)") from None
            self.sandbox.write_file(path, edited)
            self._edited.add(path)
            return f"Edited {path}: replaced {old_str.count(chr(10)) + 1} line(s)."
        return self._sandboxed(edit)

    @tool
    def create_file(self, path: str, content: str) -> str:
        """Write a whole file (created or overwritten).

        Args:
            path: File path relative to /workspace.
            content: The complete new contents.
        """
        def create() -> str:
            self.sandbox.write_file(path, content)
            self._edited.add(path)
            return f"Wrote {path} ({content.count(chr(10)) + bool(content and not content.endswith(chr(10)))} lines)."
        return self._sandboxed(create)

    @tool
    def run_tests(self, tests: str = "") -> str:
        """Run pytest and show the result.

        Args:
            tests: Space-separated test files or ids (e.g. `tests/test_x.py::test_y`); empty runs the failing ones.
        """
        assert self.task is not None
        targets = shlex.split(tests) if tests.strip() else list(self.task.test_files)
        run = self._sandboxed(lambda: run_pytest(self.sandbox, targets, timeout_s=self.test_timeout_s,
                                                 plugins=self._plugins))
        self._last_tests = last_test_line(run.output)
        return summarize(run, self.max_obs)

    @tool
    def submit(self) -> str:
        """Submit the workspace as your fix; the episode ends and the tests grade it."""
        self._guard()
        self._submitted = True
        return "Submitted for grading."

    # ------------------------------------------------------------------ scoring
    def score(self, action: str, results: list[ToolResult], answer: str | None
              ) -> tuple[dict[str, float], bool, bool]:
        components = {"progress": 0.0, "outcome": 0.0}
        if self._failure:
            return components, True, False
        try:
            submitted = self._submitted and any(r.name == "submit" and r.ok for r in results)
            if submitted or any(r.name in MUTATING_TOOLS for r in results):  # nothing else changes files
                self._hash, self._code_hash = self._workspace_hash()
            if submitted or (self.progress_weight > 0 and self._code_hash != self._graded_hash):
                run = self._cached_grade()
                self._graded_hash = self._code_hash
                self._last_tests = f"{last_test_line(run.output)} (graded with the task's tests)"
                resolved, newly = self._resolved(run)
                components["progress"] = self.progress_weight * len(newly) / len(self.task.fail_to_pass)
                if submitted:
                    components["outcome"] = 1.0 if resolved else 0.0
                    return components, True, resolved
        except SandboxError as exc:
            self._failure = f"sandbox: {exc}"
            return {"progress": 0.0, "outcome": 0.0}, True, False
        return components, False, False

    def step(self, action: str):
        obs, reward, terminated, truncated, info = super().step(action)
        if self._failure:
            obs = (obs + "\n" if obs else "") + f"[the sandbox failed: {self._failure}; this episode has ended]"
            info.update(failure=self._failure, anchor=f"failed:{self.task.instance_id if self.task else '?'}")
            terminated = True
        else:
            info["anchor"] = self._hash
        info["task_id"] = self.task.instance_id if self.task else None
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def state_summary(self) -> str:
        """The workspace's diff against the episode's start and the last test result (for the fold layout)."""
        return workspace_summary(self)

    # ------------------------------------------------------------------ oracle, render, close
    def oracle_action(self) -> str | None:
        """The smallest next edit toward the fix (one `str_replace` per turn, within the default action limit),
        or `submit` once the workspace holds the fix (see oracle.py)."""
        if self.sandbox is None or self._failure or self.task is None:
            return None
        for path, text in sorted(self._fix.items()):
            try:
                current: str | None = self.sandbox.read_file(path).decode("utf-8", "surrogateescape")
            except SandboxError:
                current = None
            if current == text:
                continue
            call: dict | None
            if text is None or current is None:  # a deleted or new file: the one case a whole-file call is needed
                call = {"name": "bash", "arguments": {"command": f"rm -f -- {shlex.quote(path)}"}} if text is None \
                    else {"name": "create_file", "arguments": {"path": path, "content": text}}
            else:
                call = next_edit(path, current, text)
            return self.render_calls([(call["name"], call["arguments"])]) if call else None
        return self.render_calls([("submit", {})])  # in the format the env reads (ToolEnv.render_calls)

    def close(self) -> None:
        self._release()

    # snapshots: the episode's fields and the workspace's files (envs/swe/snapshot.py says what it costs)
    def supports_snapshot(self) -> bool:
        return True

    def snapshot(self) -> bytes:
        from agentgym.envs.swe.snapshot import take

        return take(self)

    def restore(self, data: bytes) -> None:
        from agentgym.envs.swe.snapshot import put

        put(self, data)


def _clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: its head and tail, and a line saying how much was cut between."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(f"\n[... {len(text)} characters cut ...]\n"))
    marker = f"\n[... {len(text) - keep} characters cut ...]\n"
    return text[: keep - keep // 2] + marker + (text[-(keep // 2):] if keep // 2 else "")
