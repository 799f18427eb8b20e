"""A repository's test environment: read its test requirements, install them once from the package index.

    reqs = read_test_requirements("path/to/repo")           # Requirements(names, sources)
    env = install_requirements(reqs, "mylib")          # pip install --target <cache>/swe/deps/<key>, once

Where requirements come from: pyproject.toml (`project.dependencies`, `optional-dependencies` and
`dependency-groups` named like test/tests/testing/dev), setup.cfg (`install_requires`, `extras_require` of
those names), `requirements*test*.txt` / `test*requirements*.txt` (and the files they `-r` include), and
tox.ini `[testenv] deps` / `extras` when they are plain names. Linters, type checkers, coverage and
documentation tools are left out: the sandbox runs tests, not CI.

pip runs on the host at preparation time (the only moment with network); the folder is mounted read-only in
the sandbox at DEPS_MOUNT (/opt/agentgym-deps) and put on its PYTHONPATH, so the sandbox itself stays offline.
Packages pip cannot install are named in the result, never silently dropped. The folder is built for the host's Python
(implementation and minor version, 3.11 here, as the sandbox image's): its cache key and manifest name that Python, so
a host on another version builds its own folder, and `check_sandbox_python` refuses a sandbox whose python3 differs
(compiled wheels and version-pinned requirements would fail there as import errors, graded as the agent's).
"""
from __future__ import annotations

import configparser
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from agentgym.envs.swe.tasks import cache_dir
from agentgym.errors import ConfigError

TEST_EXTRAS = re.compile(r"^(test|tests|testing|dev|develop|development|test-requirements)$", re.I)
# Not needed to run tests (and often slow or compiled): CI, lint, type, coverage, docs, build, release and
# benchmark tools (a benchmark plugin turns a 5 s suite into 40 s; its tests then error and are left out).
NOT_FOR_TESTS = re.compile(
    r"^(ruff|flake8.*|pylint|black|isort|mypy|pyright|pre-commit|tox|nox|coverage|pytest-cov|codecov|"
    r"sphinx.*|mkdocs.*|twine|wheel|build|setuptools.*|flit.*|hatch.*|pdm.*|poetry.*|types-.*|.*-stubs|"
    r"pytest-codspeed|pytest-benchmark|pyupgrade|bandit|check-manifest|pip-tools|ipython|ipdb|pdbpp)$", re.I)
MANIFEST = "agentgym-deps.json"


@dataclass(frozen=True)
class Requirements:
    """Requirement strings a repository's tests need, and the files they were read from."""

    names: tuple[str, ...]
    sources: tuple[str, ...]


@dataclass(frozen=True)
class DepsFolder:
    """An installed requirements folder: what went in, what pip could not satisfy, pytest plugins it holds."""

    path: str
    installed: tuple[str, ...]
    unsatisfied: tuple[str, ...]
    plugins: tuple[str, ...]
    python: str | None = None   # "3.11": the minor version pip installed for (None: a folder from before it was kept)


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[(@]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _from_pyproject(repo_dir: str) -> tuple[list[str], str | None, list[str]]:
    """(requirements, the project's own name, extras the tox config may ask for are resolved by the caller)."""
    import tomllib

    path = os.path.join(repo_dir, "pyproject.toml")
    if not os.path.isfile(path):
        return [], None, []
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return [], None, []
    project = data.get("project", {})
    reqs = [r for r in project.get("dependencies", []) if isinstance(r, str)]
    extras = project.get("optional-dependencies", {})
    groups = data.get("dependency-groups", {})
    for name, items in extras.items():
        if TEST_EXTRAS.match(name):
            reqs += [r for r in items if isinstance(r, str)]
    for name in groups:
        if TEST_EXTRAS.match(name):
            reqs += _group(groups, name, set())
    return reqs, project.get("name"), list(extras)


def _group(groups: dict, name: str, seen: set[str]) -> list[str]:
    """A dependency group's requirements, with `{include-group = ...}` entries expanded (cycles ignored)."""
    if name in seen or name not in groups:
        return []
    seen.add(name)
    out: list[str] = []
    for item in groups[name]:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and "include-group" in item:
            out += _group(groups, item["include-group"], seen)
    return out


def _from_setup_cfg(repo_dir: str) -> list[str]:
    path = os.path.join(repo_dir, "setup.cfg")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
    except configparser.Error:
        return []
    reqs = _lines(parser.get("options", "install_requires", fallback=""))
    if parser.has_section("options.extras_require"):
        for name, value in parser.items("options.extras_require"):
            if TEST_EXTRAS.match(name):
                reqs += _lines(value)
    return reqs


def _lines(value: str) -> list[str]:
    return [x.split("#")[0].strip() for x in value.splitlines() if x.split("#")[0].strip()]


def _from_requirement_file(path: str, seen: set[str]) -> list[str]:
    """Requirement lines of a file; `-r other.txt` is followed, other options (-e, -c, --index-url) skipped."""
    path = os.path.realpath(path)
    if path in seen or not os.path.isfile(path):
        return []
    seen.add(path)
    out: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in _lines(fh.read()):
            if line.startswith(("-r ", "--requirement ")):
                out += _from_requirement_file(os.path.join(os.path.dirname(path), line.split(None, 1)[1]), seen)
            elif not line.startswith("-") and "://" not in line and not line.startswith((".", "/")):
                out.append(line)
    return out


def _from_tox(repo_dir: str, extras_known: list[str]) -> tuple[list[str], list[str]]:
    """(`[testenv] deps` plain names, `extras` named there that the project defines)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(os.path.join(repo_dir, "tox.ini"))
    except configparser.Error:
        return [], []
    if not parser.has_section("testenv"):
        return [], []
    # plain names only: substitutions ({...}), options (-r, -e) and factor-conditional lines ("py38: x") are skipped
    deps = [d for d in _lines(parser.get("testenv", "deps", fallback=""))
            if not re.search(r"[{}]|^-|^[\w.,!-]+:\s", d)]
    extras = [e for e in _lines(parser.get("testenv", "extras", fallback="")) if e in extras_known]
    return deps, extras


def read_test_requirements(repo_dir: str) -> Requirements:
    """What the repository's tests need besides the standard library (see the module docstring)."""
    reqs, own, extras_known = _from_pyproject(repo_dir)
    sources = ["pyproject.toml"] if reqs else []
    cfg = _from_setup_cfg(repo_dir)
    reqs += cfg
    sources += ["setup.cfg"] if cfg else []
    seen: set[str] = set()
    patterns = ("requirements*test*.txt", "test*requirements*.txt", "requirements/test*.txt", "requirements-dev.txt",
                "dev-requirements.txt")
    for path in sorted({p for pat in patterns for p in glob.glob(os.path.join(repo_dir, pat))}):
        found = _from_requirement_file(path, seen)
        reqs += found
        sources += [os.path.relpath(path, repo_dir)] if found else []
    tox_deps, tox_extras = _from_tox(repo_dir, extras_known)
    reqs += tox_deps
    if tox_extras:  # tox installs these extras of the project: read them from pyproject
        reqs += _extras(repo_dir, tox_extras)
    sources += ["tox.ini"] if tox_deps or tox_extras else []
    own_name = (own or "").lower().replace("_", "-")
    needs_cov = _addopts_use_cov(repo_dir)  # pytest refuses unknown --cov options: the plugin must be there
    if needs_cov:
        reqs.append("pytest-cov")
        sources.append("pytest addopts (--cov)")
    kept, names = [], set()
    for req in reqs:
        name = _name(req)
        if not name or name == own_name or (NOT_FOR_TESTS.match(name) and not (needs_cov and name == "pytest-cov")) \
                or req in names:
            continue
        names.add(req)
        kept.append(req.strip())
    return Requirements(tuple(kept), tuple(sources))


def _addopts_use_cov(repo_dir: str) -> bool:
    """Whether the pytest config's addopts pass --cov options (pyproject, pytest.ini, setup.cfg, tox.ini)."""
    for name in ("pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini"):
        try:
            with open(os.path.join(repo_dir, name), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        if re.search(r"^\s*addopts\s*=.*--cov", text, re.M):
            return True
    return False


def _extras(repo_dir: str, names: list[str]) -> list[str]:
    import tomllib

    with open(os.path.join(repo_dir, "pyproject.toml"), "rb") as fh:
        extras = tomllib.load(fh).get("project", {}).get("optional-dependencies", {})
    return [r for n in names for r in extras.get(n, []) if isinstance(r, str)]


def python_version() -> str:
    """The host's Python minor version, e.g. "3.11": what pip resolves and builds wheels for."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def deps_key(repo: str, reqs: Requirements) -> str:
    """The cache folder's name: the repository, the Python it is built for (`cpython3.11`) and a digest of the
    requirements, the interpreter and the machine, so no two Pythons or architectures share a folder."""
    python = f"{sys.implementation.name}{python_version()}"
    identity = "\n".join([*sorted(reqs.names), python, platform.machine()])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', repo)}-{python}-{digest}"


def load_deps_folder(path: str) -> DepsFolder | None:
    """The DepsFolder recorded in a requirements folder, or None if it was never completed."""
    try:
        with open(os.path.join(path, MANIFEST)) as fh:
            row = json.load(fh)
    except (OSError, ValueError):
        return None
    return DepsFolder(path, tuple(row["installed"]), tuple(row["unsatisfied"]), tuple(row["plugins"]),
                      row.get("python"))


# `python3 -c` in a sandbox: its minor version, as python_version() prints the host's
SANDBOX_PYTHON = "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'"


def check_sandbox_python(deps: DepsFolder, sandbox_python: str) -> None:
    """Refuse a sandbox whose python3 (`sandbox_python`, "3.12") is not the one `deps` was installed for."""
    if deps.python is None or deps.python == sandbox_python.strip():
        return
    raise ConfigError(f"the test requirements in {deps.path} were installed for Python {deps.python}, but the "
                      f"sandbox runs Python {sandbox_python.strip() or '(none found)'}; prepare the tasks with that "
                      f"Python (`python{sandbox_python.strip()} -m agentgym swe make-tasks ...`) or use a sandbox "
                      f"image whose python3 is {deps.python}")


def install_requirements(reqs: Requirements, repo: str, root: str | None = None, progress=None,
                         pip_args: tuple[str, ...] = ()) -> DepsFolder | None:
    """Install `reqs` into a cached folder (None when there is nothing to install); see the module docstring.

    `pip_args`: extra pip options (`--index-url`, `--find-links DIR --no-index` for a local wheelhouse)."""
    if not reqs.names:
        return None
    path = os.path.join(root or os.path.join(cache_dir(), "deps"), deps_key(repo, reqs))
    done = load_deps_folder(path)
    if done is not None:
        return done
    say = progress or (lambda _: None)
    say(f"{repo}: installing test requirements {', '.join(reqs.names)} (from {', '.join(reqs.sources)})")
    staging = path + ".part"
    shutil.rmtree(staging, ignore_errors=True)
    installed: list[str] = []
    unsatisfied: list[str] = []
    if _pip_target(list(reqs.names), staging, pip_args)[0]:
        installed = list(reqs.names)
    else:  # one at a time, to name exactly what cannot be had
        for req in reqs.names:
            ok, why = _pip_target([req], staging, pip_args)
            (installed if ok else unsatisfied).append(req if ok else f"{req} ({why})")
    os.makedirs(staging, exist_ok=True)
    plugins = _pytest_plugins(staging)
    with open(os.path.join(staging, MANIFEST), "w") as fh:
        json.dump({"requirements": list(reqs.names), "sources": list(reqs.sources), "installed": installed,
                   "unsatisfied": unsatisfied, "plugins": plugins, "python": python_version()}, fh, indent=1)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(staging, path)
    return DepsFolder(path, tuple(installed), tuple(unsatisfied), tuple(plugins), python_version())


def _pip_target(reqs: list[str], target: str, pip_args: tuple[str, ...] = ()) -> tuple[bool, str]:
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                           "--no-input", "--upgrade", "--target", target, *pip_args, *reqs],
                          capture_output=True, text=True, timeout=900)
    lines = [x for x in done.stderr.strip().splitlines() if x.startswith("ERROR")] or done.stderr.strip().splitlines()
    return done.returncode == 0, (lines[-1][:160] if lines else f"pip exit {done.returncode}")


def _pytest_plugins(target: str) -> list[str]:
    """Modules the installed distributions register as pytest plugins (entry point group pytest11)."""
    plugins = []
    for path in sorted(glob.glob(os.path.join(target, "*.dist-info", "entry_points.txt"))):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
        except configparser.Error:
            continue
        if parser.has_section("pytest11"):
            plugins += [value.split(":")[0].strip() for _, value in parser.items("pytest11")]
    return plugins
