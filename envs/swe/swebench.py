"""SWE-bench-format instances as SWE tasks.

An instance has `instance_id`, `repo`, `patch` (the fix), `test_patch` (tests applied only when grading),
`FAIL_TO_PASS` and `PASS_TO_PASS` (lists or JSON text, as SWE-bench stores them), `problem_statement`, and
a repository snapshot given as one of:
- `repo_dir`: a directory holding the repository at the instance's base commit;
- `image`: a Docker image with the repository at `image_repo_dir` (default /testbed, as SWE-bench's);
- `base_commit` with a local git clone at `REPOS_ROOT/<repo>`: the snapshot is `git archive`d once into
  the cache (no network: the clone must already be there).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile

from agentgym.envs.swe.tasks import SWETask, cache_dir
from agentgym.errors import ConfigError


def read_instances(path: str) -> list[dict]:
    """Rows of a SWE-bench JSON list or JSONL file."""
    if not os.path.isfile(path):
        raise ConfigError(f"no SWE-bench instance file at {path!r}")
    text = open(path).read()
    try:
        return json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines()
                                                                        if x.strip()]
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: neither a JSON list nor JSON lines ({exc})") from exc


def git_snapshot(repo_path: str, commit: str) -> str:
    """The tree of `commit` in a local git repository, extracted once into the cache."""
    key = hashlib.sha1(f"{os.path.abspath(repo_path)}@{commit}".encode()).hexdigest()[:16]
    target = os.path.join(cache_dir(), "snapshots", key)
    if os.path.isdir(target):
        return target
    try:
        archive = subprocess.run(["git", "-C", repo_path, "archive", "--format=tar", commit], capture_output=True,
                                 timeout=300, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        stderr = getattr(exc, "stderr", b"") or b""
        raise ConfigError(f"cannot snapshot {commit!r} of {repo_path!r}: {stderr.decode(errors='replace')[:200] or exc}"
                          ) from exc
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target + ".part", filter="data")
    os.replace(target + ".part", target)
    return target


def load_swebench(path: str, repos_root: str | None = None) -> list[SWETask]:
    """SWE tasks from a SWE-bench-format file; see the module docstring for the snapshot sources."""
    tasks = []
    root = os.path.dirname(os.path.abspath(path))
    for row in read_instances(path):
        row = dict(row)
        if not row.get("repo_dir") and not row.get("base_dir") and not row.get("image"):
            if not (row.get("base_commit") and repos_root):
                raise ConfigError(f"instance {row.get('instance_id', '?')!r} has no repo_dir or image; give one, or "
                                  "base_commit plus repos_root (a folder with local clones named like `repo`)")
            row["repo_dir"] = git_snapshot(os.path.join(repos_root, row["repo"]), row["base_commit"])
        row.setdefault("source", "swebench")
        tasks.append(SWETask.from_json(row, root))
    return tasks
