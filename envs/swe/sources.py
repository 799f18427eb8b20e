"""Where SWE tasks come from: the mini repositories shipped here, real libraries' sdists, or a task file.

    resolve_tasks("mini")              # tasks synthesised from envs/swe/minirepos (shipped as tasks.jsonl)
    resolve_tasks("lib")               # tasks from real libraries' sdists, downloaded and synthesised once
    resolve_tasks("path/to/tasks.jsonl")   # `agentgym swe make-tasks` output or SWE-bench-format instances
    resolve_tasks("swebench:instances.json@/path/to/clones")   # SWE-bench rows snapshotted from local clones

Library sdists (with their tests) come from the package index through pip at first use and are cached,
with the tasks made from them, under $AGENTGYM_CACHE (default ~/.cache/agentgym)/swe.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import subprocess
import sys
import tarfile
import zipfile

from agentgym.envs.swe.tasks import SWETask, cache_dir, load_tasks, save_tasks
from agentgym.errors import ConfigError

MINI_DIR = os.path.join(os.path.dirname(__file__), "minirepos")
MINI_TASKS = os.path.join(MINI_DIR, "tasks.jsonl")
# Real, well-tested pure-Python libraries whose sdists carry their tests and run under plain pytest.
LIBRARIES = (("inflection", "0.5.1"), ("toolz", "0.12.1"))
TASKS_PER_LIBRARY = 8
# The corpus (`tasks="corpus"`): more libraries from the package index, none shipped here, their test requirements
# installed at preparation time (humanize needs freezegun and pytest>=9, python-slugify text-unidecode). The held-out
# ones form the `test` split, so an agent is evaluated on repositories it never trained on.
# (more-itertools 11.2.1 was tried and left out: its concurrency tests start threads past the sandbox's 1 GB
# address space and crash pytest now and then, so no baseline is stable.)
CORPUS = (("inflection", "0.5.1"), ("toolz", "0.12.1"), ("humanize", "4.17.0"), ("cachetools", "8.0.1"),
          ("python-slugify", "9.2.0"), ("parse", "1.22.4"), ("six", "1.17.0"))
HELD_OUT = ("parse", "python-slugify")
TASKS_PER_CORPUS_LIBRARY = 20
TASKS_VERSION = "v2"  # bump when the synthesiser's rules change: cached task files of older rules are not read


def resolve_tasks(spec: str, backend: str = "auto") -> list[SWETask]:
    """Tasks named by a source spec (see the module docstring)."""
    if spec == "mini":
        return load_tasks(MINI_TASKS)
    if spec == "corpus":
        return corpus_tasks(backend)
    if spec == "lib" or spec.startswith("lib:"):
        names = spec.split(":", 1)[1].split(",") if ":" in spec else [n for n, _ in LIBRARIES]
        known = dict(LIBRARIES)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"unknown library {unknown[0]!r}; choose from {', '.join(known)}")
        return [t for name in names for t in library_tasks(name, known[name], backend)]
    if spec.startswith("swebench:"):
        from agentgym.envs.swe.swebench import load_swebench

        path, _, repos_root = spec[len("swebench:"):].partition("@")
        return load_swebench(path, repos_root or None)
    if os.path.exists(spec):
        return load_tasks(spec)
    raise ConfigError(f"unknown task source {spec!r}: use 'mini', 'lib', 'lib:NAME[,NAME]', 'corpus' or a path to a JSONL/JSON "
                      "task file (from `agentgym swe make-tasks` or SWE-bench)")


def download_sdist(name: str, version: str) -> str:
    """The unpacked source tree of NAME==VERSION from the package index (pip download), cached."""
    root = os.path.join(cache_dir(), "sdists")
    target = os.path.join(root, f"{name}-{version}")
    if os.path.isdir(target) and os.listdir(target):
        return target
    os.makedirs(root, exist_ok=True)
    archives = _archives(root, name, version)
    if not archives:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                               "--disable-pip-version-check", f"{name}=={version}", "-d", root],
                              capture_output=True, text=True, timeout=600)
        archives = _archives(root, name, version)
        if done.returncode != 0 or not archives:
            raise ConfigError(f"pip could not download the sdist of {name}=={version}: "
                              f"{done.stderr.strip()[-300:]}")
    staging = target + ".part"
    if archives[0].endswith(".zip"):
        zipfile.ZipFile(archives[0]).extractall(staging)
    else:
        with tarfile.open(archives[0]) as tar:
            tar.extractall(staging, filter="data")
    (top,) = os.listdir(staging)  # sdists hold one folder, NAME-VERSION/
    os.replace(os.path.join(staging, top), target)
    os.rmdir(staging)
    return target


def _archives(root: str, name: str, version: str) -> list[str]:
    names = {name, name.replace("-", "_"), name.lower().replace("-", "_")}  # sdists use the normalised name
    return sorted({p for n in names for pattern in (f"{n}-{version}.tar.gz", f"{n}-{version}.zip")
                   for p in glob.glob(os.path.join(root, pattern))})


def library_tasks(name: str, version: str, backend: str = "auto", max_tasks: int = TASKS_PER_LIBRARY,
                  progress=None, split: str | None = None) -> list[SWETask]:
    """Synthesised tasks for one library, its test requirements installed (made once, then read from the cache)."""
    from agentgym.envs.swe.deps import install_requirements, read_test_requirements
    from agentgym.envs.swe.synth import synthesize

    path = os.path.join(cache_dir(), "tasks", TASKS_VERSION, f"{name}-{version}-{max_tasks}.jsonl")
    if os.path.isfile(path):
        return load_tasks(path)
    larger = os.path.join(cache_dir(), "tasks", TASKS_VERSION, f"{name}-{version}-{TASKS_PER_CORPUS_LIBRARY}.jsonl")
    if split is None and max_tasks < TASKS_PER_CORPUS_LIBRARY and os.path.isfile(larger):  # the corpus made them
        return [dataclasses.replace(t, extra={k: v for k, v in t.extra.items() if k != "split"})
                for t in load_tasks(larger)[:max_tasks]]
    repo_dir = download_sdist(name, version)
    deps = install_requirements(read_test_requirements(repo_dir), name, progress=progress)
    if deps is not None and deps.unsatisfied and progress:
        progress(f"{name}: could not install {'; '.join(deps.unsatisfied)}")
    report = synthesize(repo_dir, repo=name, backend=backend, max_tasks=max_tasks, max_candidates=6 * max_tasks,
                        progress=progress, deps=deps)
    if not report.tasks:
        raise ConfigError(f"no valid bug task could be made from {name}=={version} ({report.rejected})")
    tasks = [dataclasses.replace(t, extra={**t.extra, "split": split}) if split else t for t in report.tasks]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_tasks(tasks, path + ".part")
    os.replace(path + ".part", path)
    return load_tasks(path)


def corpus_tasks(backend: str = "auto", progress=None, names: list[str] | None = None) -> list[SWETask]:
    """Tasks of every CORPUS library (held-out libraries in the `test` split, the others in `train`)."""
    chosen = [(n, v) for n, v in CORPUS if names is None or n in names]
    return [t for name, version in chosen
            for t in library_tasks(name, version, backend, TASKS_PER_CORPUS_LIBRARY, progress,
                                   split="test" if name in HELD_OUT else "train")]
