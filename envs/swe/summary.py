"""A bounded summary of a repository's files for the first observation of an SWE episode.

A listing of every file does not fit a prompt: a real repository holds thousands (docs, locale catalogues,
CI workflows, vendored code). The summary shows the folder tree to a depth, Python files first and by name,
counts the other files by extension, folds generated, vendored, locale and CI folders into one line each, and
stops at `budget` characters, saying what it left out. The agent lists more with its tools (`bash`, `view_file`).
"""
from __future__ import annotations

import posixpath
from collections import Counter
from dataclasses import dataclass, field

# Folders whose files are folded into one count each: nobody fixes a bug by reading them first.
FOLDED_DIRS = {
    "locale": "locale data", "locales": "locale data", "translations": "locale data", "i18n": "locale data",
    ".github": "CI config", ".gitlab": "CI config", ".circleci": "CI config", ".azure-pipelines": "CI config",
    "node_modules": "vendored", "vendor": "vendored", "_vendor": "vendored", "vendored": "vendored",
    "third_party": "vendored", "site-packages": "vendored", "build": "generated", "dist": "generated",
    "__pycache__": "generated", ".tox": "generated", ".nox": "generated", "htmlcov": "generated",
    ".mypy_cache": "generated", ".pytest_cache": "generated", ".ruff_cache": "generated", ".git": "generated",
}
FOLDED_SUFFIXES = {".po": "locale data", ".mo": "locale data", ".pot": "locale data", ".pyc": "generated",
                   ".min.js": "generated", ".map": "generated"}


@dataclass
class _Folder:
    python: list[str] = field(default_factory=list)
    root_files: list[str] = field(default_factory=list)
    others: Counter = field(default_factory=Counter)
    deeper_python: int = 0
    deeper_other: int = 0
    deeper_dirs: set = field(default_factory=set)


def _folded_kind(path: str) -> tuple[str, str] | None:
    """(kind, folder shown) when a path belongs to a folded group, else None."""
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        kind = FOLDED_DIRS.get(part) or ("generated" if part.endswith(".egg-info") else None)
        if kind:
            return kind, "/".join(parts[: i + 1])
    for suffix, kind in FOLDED_SUFFIXES.items():
        if parts[-1].endswith(suffix):
            return kind, posixpath.dirname(path) or "."
    return None


def _extension(name: str) -> str:
    ext = posixpath.splitext(name)[1]
    return ext if ext else name if name.startswith(".") else "(no ext)"


def _folder_line(name: str, folder: _Folder, max_names: int) -> str:
    head = f"{name}/" if name != "." else "./"
    parts = []
    if folder.python:
        shown = sorted(folder.python)[:max_names]
        more = len(folder.python) - len(shown)
        parts.append(" ".join(shown) + (f" (+{more} more .py)" if more else ""))
    if folder.root_files:
        shown = sorted(folder.root_files)[:max_names]
        more = len(folder.root_files) - len(shown)
        parts.append(" ".join(shown) + (f" (+{more} more)" if more else ""))
    if folder.others:
        common = sorted(folder.others.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        counts = ", ".join(f"{n} {ext}" for ext, n in common)
        rest = sum(folder.others.values()) - sum(n for _, n in common)
        parts.append(f"[other: {counts}{f', {rest} more' if rest else ''}]")
    if folder.deeper_python or folder.deeper_other:
        parts.append(f"[{len(folder.deeper_dirs)} subfolders: {folder.deeper_python} .py, {folder.deeper_other} other]")
    return f"{head} {' '.join(parts)}"


def summarize_files(paths: list[str], budget: int = 1500, max_depth: int = 3, max_names: int = 12) -> str:
    """A summary of `paths` (workspace-relative file paths) in at most `budget` characters (see the module doc).

    The deepest tree (up to `max_depth`) that fits whole is shown; if none does, depth 1, cut to the budget.
    """
    text = ""
    for depth in range(max_depth, 0, -1):
        text, complete = _summary_at_depth(paths, budget, depth, max_names)
        if complete:
            break
    return text


def _summary_at_depth(paths: list[str], budget: int, depth: int, max_names: int) -> tuple[str, bool]:
    folded: dict[tuple[str, str], int] = Counter()
    folders: dict[str, _Folder] = {}
    python_total = 0
    for path in paths:
        kind = _folded_kind(path)
        if kind:
            folded[kind] += 1
            continue
        directory, name = posixpath.split(path)
        parts = directory.split("/") if directory else []
        is_py = name.endswith((".py", ".pyi"))
        python_total += is_py
        key = "/".join(parts[:depth]) or "."
        folder = folders.setdefault(key, _Folder())
        if len(parts) > depth:
            folder.deeper_python += is_py
            folder.deeper_other += not is_py
            folder.deeper_dirs.add(directory)
        elif is_py:
            folder.python.append(name)
        elif not parts:  # the root's own files (README, pyproject.toml, tox.ini) are named
            folder.root_files.append(name)
        else:
            folder.others[_extension(name)] += 1
    # Folders with Python code first (shallow before deep), then the rest; the root's files always.
    order = sorted(folders, key=lambda k: (k != ".", not (folders[k].python or folders[k].deeper_python),
                                           k.count("/"), k))
    header = f"{len(paths)} files ({python_total} Python) in {len(folders)} folders shown to depth {depth}"
    fold_line = "; ".join(f"{kind}: {n} files in {where}" for (kind, where), n in
                          sorted(folded.items(), key=lambda kv: (-kv[1], kv[0])))
    lines = [header + ("" if not fold_line else f"; folded: {_cut(fold_line, max(80, budget // 4))}")]
    used, shortened, cut = len(lines[0]), False, False
    for i, key in enumerate(order):
        line = _folder_line(key, folders[key], max_names)
        tail = f"... {len(order) - i} more folders not shown; list them with bash (e.g. `find . -name '*.py'`)"
        if used + len(line) + 1 + len(tail) + 1 > budget:
            short = _folder_line(key, folders[key], 3)
            if used + len(short) + 1 + len(tail) + 1 > budget:
                lines.append(tail)
                cut = True  # the tail stands in for this folder and the rest: even a cut last folder is a cut
                break
            line, shortened = short, True
        lines.append(line)
        used += len(line) + 1
    text = "\n".join(lines)
    complete = not cut and not shortened and len(text) <= budget
    return (text if len(text) <= budget else _cut(text, budget)), complete


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 4)] + " ..."
