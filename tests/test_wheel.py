"""The built wheel and sdist hold the whole package: one import root, `agentgym/`, with every file it reads at run
time (train presets, templates, task files, env data). Installed into a fresh venv outside the repo they list,
train, evaluate and scaffold an env package from another directory.

Built (`python -m build`: the sdist, then the wheel from that sdist) from a copy of the working tree as a clone
would have it, so the repo gets no build/ or egg-info from this test.
"""
import ast
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# source folder -> where it lands in the wheel (setup.py maps the top-level folders under one import root)
MAPPED = {"agentgym": "agentgym", "envs": "agentgym/envs", "tools": "agentgym/tools",
          "policies": "agentgym/policies", "train": "agentgym/train"}
NOT_SHIPPED = {"README.md"}   # the env families' notes: documentation, never read at run time
VERSION = next(node.value.value for node in ast.parse((ROOT / "agentgym" / "__init__.py").read_text()).body
               if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__version__")


def _clone_files() -> list[str]:
    """The working tree's files a clone would have: tracked and untracked-but-not-ignored."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:   # not a git checkout: everything but what .gitignore names
        skip = {".git", "runs", ".venv", "build", "dist", "site", "__pycache__", ".pytest_cache", ".ruff_cache"}
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and not p.name.endswith(".pyc")
                and not any(part in skip or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)]
    return [f for f in out.stdout.splitlines() if (ROOT / f).is_file()]


def _package_files() -> dict[str, str]:
    """Each source file of the package -> its path in the wheel."""
    wanted = {}
    for f in _clone_files():
        folder, _, rest = f.partition("/")
        if folder in MAPPED and rest and Path(f).name not in NOT_SHIPPED:
            wanted[f] = f"{MAPPED[folder]}/{rest}"
    return wanted


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    # the build (a subprocess) uses the installed setuptools; its version is read, not imported: importing it in a
    # process where another test already imported the standard library's distutils fails (setuptools' shim)
    try:
        setuptools_major = int(importlib.metadata.version("setuptools").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        setuptools_major = 0
    if setuptools_major < 77:
        pytest.skip("building without isolation uses the installed setuptools, which must be 77 or newer")
    if importlib.util.find_spec("build") is None:
        pytest.skip("needs `build` (the test extra: pip install -e '.[test]')")
    src = tmp_path_factory.mktemp("src")
    for f in _clone_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    dist = tmp_path_factory.mktemp("dist")
    out = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (wheel,) = dist.glob("agentgym-*.whl")
    (sdist,) = dist.glob("agentgym-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_wheel_contains_only_agentgym(dists):
    wheel = dists["wheel"]
    names = zipfile.ZipFile(wheel).namelist()
    roots = {n.split("/")[0] for n in names}
    assert roots == {"agentgym", f"agentgym-{VERSION}.dist-info"}
    # the project's tests stay out; the SWE mini repositories' own tests are package data and belong in
    assert not any(n.startswith(("tests/", "agentgym/tests/", "envs/", "tools/", "train/", "policies/")) for n in names)
    entry_points = zipfile.ZipFile(wheel).read(f"agentgym-{VERSION}.dist-info/entry_points.txt").decode()
    assert "agentgym = agentgym.cli:main" in entry_points


def test_wheel_holds_every_file_the_package_reads(dists):
    names = set(zipfile.ZipFile(dists["wheel"]).namelist())
    wanted = _package_files()
    for must in ("train/configs/toy_learning.yaml", "agentgym/eval/schema.json", "envs/swe/minirepos/tasks.jsonl",
                 "envs/web/shop/templates/base.html", "envs/mcp/demo/facts.yaml"):
        assert must in wanted, must   # the comparison below sees the data files
    missing = sorted(src for src, dest in wanted.items() if dest not in names)
    assert not missing, f"{len(missing)} package file(s) not in the wheel (pyproject.toml's package-data): {missing}"


def test_sdist_holds_the_package_sources(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    missing = sorted(f for f in _package_files() if f not in names)
    assert not missing, f"{len(missing)} package file(s) not in the sdist: {missing}"
    assert {"pyproject.toml", "setup.py", "README.md", "CHANGELOG.md", "mkdocs.yml", "constraints/cpu.txt",
            "docs/index.md", "docs/hooks/agentgym_docs.py"} <= names   # MANIFEST.in


def _run(cmd, cwd, env, timeout=600):
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_installed_outside_the_repo_lists_trains_and_evaluates(dists, kind, tmp_path):
    # A fresh venv that sees the system's packages (torch etc.; reinstalling them would take minutes) and gets
    # agentgym from the dist only: --ignore-installed so pip neither skips it (the editable install has the same
    # version) nor touches the system's copy.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python, agentgym = venv / "bin" / "python", venv / "bin" / "agentgym"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONSAFEPATH"}}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NO_COLOR="1")
    work = tmp_path / "elsewhere"
    work.mkdir()
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--ignore-installed",
          "--no-build-isolation", str(dists[kind])], work, env)

    # the venv's copy, not the editable one in the system site-packages, and its presets beside it
    where = _run([str(python), "-c", "import agentgym, agentgym.train.config as c; print(agentgym.__file__); "
                  "print(c.PRESET_DIR); print(sorted(p.stem for p in c.PRESET_DIR.glob('*.yaml')))"], work, env)
    module_file, preset_dir, presets = where.splitlines()
    assert Path(module_file).is_relative_to(venv) and Path(preset_dir).is_relative_to(venv), where
    assert "toy_learning" in presets and "quickstart_cpu" in presets

    assert _run([str(agentgym), "--version"], work, env).strip() == f"agentgym {VERSION}"
    assert "agentgym/Toy-KeyDoor-OneWord-v0" in _run([str(agentgym), "list"], work, env)
    _run([str(agentgym), "train", "toy_learning", "train.iterations=1", "train.run_dir=run", "eval.every=0"], work, env)
    assert (work / "run" / "metrics.jsonl").read_text().count("\n") == 1
    _run([str(agentgym), "eval", "--policy", "checkpoint:run/ckpt-1", "--env", "agentgym/Toy-KeyDoor-OneWord-v0",
          "--episodes", "2", "--out", "ev", "--no-progress"], work, env)
    assert (work / "ev" / "results.json").is_file() and (work / "ev" / "report.html").is_file()
    # the scaffold's templates are package data too: a new env package, checked on the spot
    assert "check_env passed: api" in _run([str(agentgym), "new", "env", "wheel_demo"], work, env)
