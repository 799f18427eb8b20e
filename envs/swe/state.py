"""What an SWE episode's workspace looks like now, in a few lines: the `fold` layout's env summary.

The diff of the files the task touches and the files the agent edited, against the buggy workspace the
episode started from (bounded), and the last test result the agent or the grader saw.
"""
from __future__ import annotations

import difflib
from typing import Any

DIFF_CHARS = 2000  # the summary replaces many turns; it must stay far below a turn's budget


def last_test_line(output: str) -> str:
    """The pytest summary line ("2 failed, 3 passed in 0.4s"), else the output's last line."""
    lines = [line.strip(" =") for line in output.strip().splitlines() if line.strip(" =")]
    summary = [line for line in lines if " passed" in line or " failed" in line or " error" in line]
    return (summary or lines or [""])[-1][:200]


def workspace_diff(env: Any, limit: int = DIFF_CHARS) -> str:
    """A unified diff of the workspace against the episode's start, over the files the task or the agent named."""
    if env.sandbox is None:
        return ""
    chunks = []
    for path in sorted(set(env._start_files) | set(env._edited)):
        before = env._start_files.get(path, "")
        try:
            now = env.sandbox.read_file(path).decode("utf-8", "surrogateescape")
        except Exception:  # deleted, or the sandbox is gone: say so rather than fail the fold
            now = ""
        if now != before:
            chunks.append("".join(difflib.unified_diff(before.splitlines(True), now.splitlines(True),
                                                       f"a/{path}", f"b/{path}", n=1)))
    text = "".join(chunks)
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters of diff]"


def workspace_summary(env: Any) -> str:
    """The env's `state_summary()`: files changed so far (a diff) and the last test result."""
    if env.task is None or env.sandbox is None:
        return ""
    diff = workspace_diff(env)
    changed = f"Changes so far:\n{diff}" if diff else "No file changed yet."
    tests = f"\nLast test run: {env._last_tests}" if env._last_tests else "\nNo test run yet."
    return changed + tests
