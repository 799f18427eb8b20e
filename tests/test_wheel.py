"""The built wheel holds one import root, `agentgym/` (the mapped envs/tools/policies/train included).

Built from a copy of the sources in a temp dir, so the repo gets no build/ or egg-info from this test.
"""
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("agentgym", "envs", "tools", "policies", "train")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    # the build (a subprocess) uses the installed setuptools; its version is read, not imported: importing it in a
    # process where another test already imported the standard library's distutils fails (setuptools' shim)
    try:
        setuptools_major = int(importlib.metadata.version("setuptools").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        setuptools_major = 0
    if setuptools_major < 64:
        pytest.skip("building without isolation uses the installed setuptools, which must be 64 or newer")
    src = tmp_path_factory.mktemp("src")
    for folder in FOLDERS:
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", ".",
                          "-w", str(dist)], cwd=src, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (path,) = dist.glob("agentgym-*.whl")
    return path


def test_wheel_contains_only_agentgym(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    roots = {n.split("/")[0] for n in names}
    assert roots == {"agentgym", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for package in ("agentgym/envs/__init__.py", "agentgym/envs/toy/keydoor.py", "agentgym/policies/base.py",
                    "agentgym/tools/__init__.py", "agentgym/train/__init__.py", "agentgym/checker.py"):
        assert package in names, package
    # the project's tests stay out; the SWE mini repositories' own tests are package data and belong in
    assert not any(n.startswith(("tests/", "agentgym/tests/", "envs/", "tools/", "train/", "policies/")) for n in names)
    assert "agentgym/envs/swe/minirepos/intervals/tests/test_ops.py" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "agentgym = agentgym.cli:main" in entry_points


def test_installed_wheel_imports(wheel, tmp_path):
    target = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                          str(wheel)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    code = (f"import sys; sys.path.insert(0, {str(target)!r}); import agentgym, agentgym.tools.retrieval; "
            "from agentgym.tools import tool; assert agentgym.__file__.startswith(sys.path[0]); "
            "print(agentgym.list_envs('agentgym/Toy'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "agentgym/Toy-KeyDoor-v0" in out.stdout
