"""Type-check agentgym with mypy across its wings: `python3 scripts/typecheck.py [FILE ...]`.

The repo maps top-level folders under one import root (envs/ -> agentgym.envs, train/ -> agentgym.train,
...; setup.py), which no static reader can see: `import agentgym.train.config` has no file at
agentgym/train/config.py. This script lays the installed shape out as symlinks (agentgym/ with envs, tools,
policies, train linked in) in one folder under the temporary directory, the same every run so that mypy's cache
serves the next, and runs mypy there, so every cross-wing import resolves to its real file. Extra FILEs are
checked in the same run (tests/test_static_checks.py passes a deliberately wrong call across a wing boundary and
expects an error).

The code base predates the checker: the errors it had on the day it was added are listed, without line
numbers, in scripts/mypy_baseline.txt. The check fails on any error not listed there (new code is held to
the checker), and says which listed ones are gone (delete them from the list: it only shrinks).
`python3 scripts/typecheck.py --update-baseline` rewrites the list. Exit status: 1 on new errors.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "scripts" / "mypy_baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):(?P<line>\d+): error: (?P<message>.*)$")
WINGS = {"envs": "envs", "tools": "tools", "policies": "policies", "train": "train"}
# The packages checked: the core and the training stack, where the update seam's types matter most.
CHECKED = ["agentgym"]


def shadow_tree(root: Path) -> Path:
    """`root/agentgym`: the repo's agentgym/ entries and the wings, as symlinks (rebuilt if present)."""
    package = root / "agentgym"
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for entry in (REPO / "agentgym").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in WINGS.items():
        (package / name).symlink_to(REPO / folder)
    return root


def shadow_root() -> Path:
    """One folder per checkout, the same every run: mypy's cache is keyed by the paths it read, so a fresh
    temporary folder each run re-checked every module (~40 s here) where a stable one takes ~6 s."""
    tag = hashlib.sha1(str(REPO).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"agentgym-typecheck-{tag}"


def run_mypy(extra_files: list[str] | None = None) -> subprocess.CompletedProcess:
    """mypy over CHECKED (and `extra_files`) in a shadow tree; returns the finished process."""
    root = shadow_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:  # two checks of one checkout at once take turns
        fcntl.flock(lock, fcntl.LOCK_EX)
        shadow_tree(root)
        for stale in root.glob("*.py"):  # extra files of an earlier run
            stale.unlink()
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
               "--cache-dir", str(root / "cache")]
        for package in CHECKED:
            cmd += ["-p", package]
        for path in map(Path, extra_files or []):  # mypy takes packages or files, not both: link them in
            (root / path.name).symlink_to(path.resolve())
            cmd += ["-m", path.stem]
        env = {**os.environ, "MYPYPATH": str(root)}
        return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)


def error_keys(output: str) -> list[str]:
    """'path: message' for each error line of mypy's output (line numbers dropped: they move)."""
    keys = []
    for line in output.splitlines():
        match = ERROR.match(line)
        if match:
            keys.append(f"{match['path']}: {match['message']}")
    return keys


def new_errors(output: str, baseline: list[str]) -> list[str]:
    """The errors of `output` beyond the baseline (counted: a listed message may occur as often as listed)."""
    allowed: dict[str, int] = {}
    for key in baseline:
        allowed[key] = allowed.get(key, 0) + 1
    fresh = []
    for line in output.splitlines():
        keys = error_keys(line)
        if not keys:
            continue
        if allowed.get(keys[0], 0) > 0:
            allowed[keys[0]] -= 1
        else:
            fresh.append(line)
    return fresh


def main(argv: list[str]) -> int:
    update = "--update-baseline" in argv
    result = run_mypy([a for a in argv if a != "--update-baseline"])
    if result.returncode not in (0, 1) or not result.stdout.strip():  # mypy itself failed
        sys.stderr.write(result.stdout + result.stderr)
        return 2
    if update:
        BASELINE.write_text("".join(k + "\n" for k in sorted(error_keys(result.stdout))))
        print(f"wrote {len(error_keys(result.stdout))} known errors to {BASELINE}")
        return 0
    baseline = BASELINE.read_text().splitlines() if BASELINE.exists() else []
    fresh = new_errors(result.stdout, baseline)
    gone = len(baseline) - (len(error_keys(result.stdout)) - len(fresh))
    for line in fresh:
        print(line)
    print(f"mypy: {len(fresh)} new error(s), {len(baseline)} known ({gone} of them fixed since: "
          f"shrink {BASELINE.name} with --update-baseline)" if gone else
          f"mypy: {len(fresh)} new error(s), {len(baseline)} known")
    return 1 if fresh else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
