"""SWE tasks: the record, JSONL in and out, and unified diffs (made with difflib, applied here).

A task is SWE-bench-shaped: a repository snapshot (`base_dir`, or a Docker `image` holding it), a
`problem_statement`, the fix (`patch`), tests hidden from the agent (`test_patch`), and the test ids
that must go from failing to passing (`FAIL_TO_PASS`) and keep passing (`PASS_TO_PASS`). Synthesised
tasks add `bug_patch`, which turns the clean snapshot into the buggy workspace.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Iterable

from agentgym.errors import ConfigError


@dataclass(frozen=True)
class SWETask:
    """One bug-fix task; field names follow SWE-bench where they exist there."""

    instance_id: str
    repo: str
    base_dir: str                              # host directory with the repository snapshot
    problem_statement: str
    patch: str                                 # the fix, a unified diff against the buggy workspace
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...] = ()
    test_patch: str = ""                       # tests written in only when grading (the agent never sees them)
    bug_patch: str = ""                        # clean snapshot -> buggy workspace (synthesised tasks)
    image: str | None = None                   # a Docker image that holds the repository at `image_repo_dir`
    image_repo_dir: str = "/testbed"
    source: str = ""                           # "synth:<mutation>", "swebench", ...
    deps_dir: str = ""                         # host folder of the tests' requirements (envs/swe/deps.py)
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> dict:
        row = asdict(self)
        row["FAIL_TO_PASS"], row["PASS_TO_PASS"] = list(row.pop("fail_to_pass")), list(row.pop("pass_to_pass"))
        return row

    @classmethod
    def from_json(cls, row: dict, root: str = ".") -> "SWETask":
        """Read one JSON row; relative `base_dir`s are relative to `root` (the JSONL file's folder)."""
        f2p, p2p = row.get("FAIL_TO_PASS", row.get("fail_to_pass", [])), row.get("PASS_TO_PASS",
                                                                              row.get("pass_to_pass", []))
        f2p, p2p = (json.loads(v) if isinstance(v, str) else v for v in (f2p, p2p))  # SWE-bench stores JSON text
        missing = [k for k in ("instance_id", "patch") if not row.get(k)]
        if missing or not f2p:
            raise ConfigError(f"task {row.get('instance_id', '?')!r} lacks {', '.join(missing) or 'FAIL_TO_PASS'}; "
                              "a task needs instance_id, patch and a non-empty FAIL_TO_PASS")
        base = row.get("base_dir") or row.get("repo_dir") or ""
        if base and not os.path.isabs(base):
            base = os.path.normpath(os.path.join(root, base))
        deps = row.get("deps_dir") or ""
        if deps and not os.path.isabs(deps):
            deps = os.path.normpath(os.path.join(root, deps))
        known = {f for f in cls.__dataclass_fields__} | {"FAIL_TO_PASS", "PASS_TO_PASS", "repo_dir"}
        return cls(instance_id=str(row["instance_id"]), repo=str(row.get("repo", "")), base_dir=base,
                   problem_statement=str(row.get("problem_statement", "")), patch=row["patch"],
                   fail_to_pass=tuple(f2p), pass_to_pass=tuple(p2p), test_patch=row.get("test_patch") or "",
                   bug_patch=row.get("bug_patch") or "", image=row.get("image"),
                   image_repo_dir=row.get("image_repo_dir", "/testbed"), source=row.get("source", ""), deps_dir=deps,
                   extra={**(row.get("extra") or {}), **{k: v for k, v in row.items() if k not in known}})

    @property
    def test_files(self) -> tuple[str, ...]:
        """The test files the graded ids live in."""
        return tuple(sorted({t.split("::")[0] for t in (*self.fail_to_pass, *self.pass_to_pass)}))

    @property
    def split(self) -> str:
        """`extra["split"]` where the task names one (the corpus holds out whole repositories); else a stable
        hash split: one task in five is `test`, by the hash of its id."""
        if self.extra.get("split") in ("train", "test"):
            return self.extra["split"]
        return "test" if int(hashlib.sha1(self.instance_id.encode()).hexdigest(), 16) % 5 == 0 else "train"


def cache_dir() -> str:
    """Where SWE sources (library sdists, repository snapshots) are cached, outside any clone."""
    return os.path.join(os.environ.get("AGENTGYM_CACHE", os.path.expanduser("~/.cache/agentgym")), "swe")


def save_tasks(tasks: Iterable[SWETask], path: str, root: str | None = None) -> None:
    """Write tasks as JSONL; `base_dir`s are stored relative to `root` (default: the file's folder)."""
    root = os.path.abspath(root or os.path.dirname(os.path.abspath(path)))
    with open(path, "w") as fh:
        for task in tasks:
            row = task.to_json()
            for key in ("base_dir", "deps_dir"):
                if row[key]:
                    row[key] = os.path.relpath(row[key], root)
            fh.write(json.dumps(row) + "\n")


def load_tasks(path: str) -> list[SWETask]:
    """Tasks from a JSONL file (one task per line) or a JSON list, as `save_tasks` and SWE-bench write them."""
    if not os.path.isfile(path):
        raise ConfigError(f"no task file at {path!r}; make one with `agentgym swe make-tasks REPO --out DIR`")
    with open(path) as fh:
        text = fh.read()
    try:
        rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines()
                                                                        if x.strip()]
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON lines ({exc})") from exc
    return [SWETask.from_json(r, os.path.dirname(os.path.abspath(path))) for r in rows]


# ----------------------------------------------------------------------------------------------- diffs

def make_diff(path: str, old: str | None, new: str | None) -> str:
    """A git-style unified diff of one file (None: the file does not exist on that side)."""
    a = (old or "").splitlines(keepends=True)
    b = (new or "").splitlines(keepends=True)
    for lines in (a, b):
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n\\ No newline at end of file\n"
    head = f"diff --git a/{path} b/{path}\n"
    if old is None:
        head += "new file mode 100644\n"
    elif new is None:
        head += "deleted file mode 100644\n"
    body = "".join(difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}",
                                        "/dev/null" if new is None else f"b/{path}", n=3))
    return head + body if body else ""


class PatchError(ValueError):
    """A diff does not apply to the files it names."""


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_diff(diff: str) -> list[tuple[str | None, str | None, list[tuple[int, list[str]]]]]:
    """(old path, new path, hunks) per file; a hunk is (old start line, its lines with their +/-/space)."""
    files: list = []
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = (_strip_path(lines[i][4:]), _strip_path(lines[i + 1][4:]))
            hunks: list = []
            i += 2
            while i < len(lines) and lines[i].startswith("@@"):
                m = _HUNK.match(lines[i])
                if not m:
                    raise PatchError(f"bad hunk header {lines[i].strip()!r}")
                start, body = int(m.group(1)), []
                i += 1
                while i < len(lines) and lines[i][:1] in (" ", "+", "-", "\\"):
                    if lines[i].startswith("\\"):
                        if body:
                            body[-1] = body[-1].rstrip("\n")
                    else:
                        body.append(lines[i] if lines[i].endswith("\n") else lines[i] + "\n")
                    i += 1
                hunks.append((start, body))
            files.append((old, new, hunks))
        else:
            i += 1
    return files


def _strip_path(raw: str) -> str | None:
    path = raw.rstrip("\n").split("\t")[0].strip()
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def apply_diff(files: dict[str, str], diff: str) -> dict[str, str | None]:
    """Apply a unified diff to `files` (path -> text); returns the changed files (None = deleted).

    Hunks must match exactly (no fuzz), so a diff made for other contents fails loudly.
    """
    changed: dict[str, str | None] = {}
    for old_path, new_path, hunks in parse_diff(diff):
        path = new_path or old_path
        assert path is not None
        source = "" if old_path is None else changed.get(old_path, files.get(old_path))
        if source is None:
            raise PatchError(f"the diff changes {old_path!r}, which does not exist")
        if new_path is None:
            changed[old_path] = None
            continue
        changed[path] = _apply_hunks(source, hunks, path)
    return changed


def _apply_hunks(text: str, hunks: list, path: str) -> str:
    lines = text.splitlines(keepends=True)
    out, pos = [], 0
    for start, body in hunks:
        at = max(start - 1, 0) if any(b[0] in " -" for b in body) else start
        expected = [b[1:] for b in body if b[0] in " -"]
        if _norm(lines[at:at + len(expected)]) != _norm(expected) or at < pos:
            raise PatchError(f"a hunk at line {start} of {path!r} does not match the file")
        out += lines[pos:at]
        out += [b[1:] for b in body if b[0] in " +"]
        pos = at + len(expected)
    out += lines[pos:]
    return "".join(out)


def _norm(lines: list[str]) -> list[str]:
    return [x.rstrip("\n") for x in lines]


def read_tree(root: str, paths: Iterable[str]) -> dict[str, str]:
    """Text of the named files under `root` (missing ones are left out)."""
    found = {}
    for path in paths:
        full = os.path.join(root, path)
        if os.path.isfile(full):
            with open(full, encoding="utf-8", errors="surrogateescape") as fh:
                found[path] = fh.read()
    return found


def diff_paths(diff: str) -> list[str]:
    """Every path a diff touches."""
    return sorted({p for old, new, _ in parse_diff(diff) for p in (old, new) if p})
