"""scripts/install.sh on a stock Debian 12, in a real Debian root filesystem: the SWE sandbox image
(agentgym/swe-base:1, debootstrapped bookworm minbase) whose python3 is the distribution's (3.11, no pip
module, EXTERNALLY-MANAGED per PEP 668). No network (`docker run --network none`): Debian's python3-venv
comes from a local apt repository and agentgym's core dependencies from a local wheelhouse, both filled
beforehand by scripts/prepare_install_test.sh (install.sh --test runs it).

What is checked: the PEP 668 path makes a virtual environment in .venv (installing python3-venv first),
`import agentgym` works there, install.sh says how to activate it, the scripts that follow (quickstart.sh,
.ci/run) resolve that .venv, a second run reuses it, and an active virtual environment is used as it is.
The default install (torch, the model) is not run: `--core` installs the package and its core
dependencies. On this machine and CI (python3 with pip, unmarked) install.sh keeps using python3."""
from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = Path(os.environ.get("AGENTGYM_CACHE", Path.home() / ".cache" / "agentgym")) / "install-test"

IN_DEBIAN = r"""
set -euxo pipefail
# the stock Debian situation the issue describes
python3 --version
! python3 -c 'import pip'
test -f "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED"
! dpkg -s python3-venv >/dev/null 2>&1
# no network: apt reads a local flat repository, pip a local wheelhouse
mkdir -p /etc/apt/offline && mv /etc/apt/sources.list /etc/apt/sources.list.d/* /etc/apt/offline/ 2>/dev/null || true
echo 'deb [trusted=yes] file:/sources/debs ./' > /etc/apt/sources.list.d/local.list
export PIP_NO_INDEX=1 PIP_FIND_LINKS=/sources/wheels
cp -a /repo /src && cd /src

bash scripts/install.sh --core > /tmp/first.log 2>&1 || { cat /tmp/first.log; exit 1; }
cat /tmp/first.log
dpkg -s python3-venv | grep -q 'Status: install ok installed'
grep -q 'a virtual environment in /src/.venv' /tmp/first.log
grep -q 'Activate it with:  source .venv/bin/activate' /tmp/first.log
.venv/bin/python -c 'import sys, agentgym; assert sys.prefix == "/src/.venv", sys.prefix; print("IMPORT-OK", agentgym.__file__, len(agentgym.list_envs()))'
! python3 -c 'import agentgym' 2>/dev/null   # the system python3 was left alone
test "$(bash -c 'source scripts/python.sh; agentgym_python')" = /src/.venv/bin/python
grep -q 'source scripts/python.sh' scripts/quickstart.sh .ci/run

bash scripts/install.sh --core > /tmp/second.log 2>&1 || { cat /tmp/second.log; exit 1; }
! grep -q 'a virtual environment in' /tmp/second.log
grep -q 'installing into /src/.venv' /tmp/second.log

rm -rf .venv && python3 -m venv /opt/own && source /opt/own/bin/activate
bash scripts/install.sh --core > /tmp/third.log 2>&1 || { cat /tmp/third.log; exit 1; }
deactivate
test ! -e .venv && grep -q 'installing into /opt/own' /tmp/third.log && ! grep -q 'Activate it with' /tmp/third.log
/opt/own/bin/python -c 'import agentgym; print("ACTIVE-VENV-OK")'
"""


def _docker_image() -> str:
    from agentgym.tools.sandbox.docker import DEFAULT_IMAGE, docker_problem

    problem = docker_problem(DEFAULT_IMAGE)
    if problem:
        pytest.skip(f"needs the Debian sandbox image: {problem}")
    if not (SOURCES / "debs" / "Packages").is_file() or not (SOURCES / "wheels" / ".complete").is_file():
        pytest.skip(f"no local package sources in {SOURCES}: run bash scripts/prepare_install_test.sh")
    return DEFAULT_IMAGE


def _repo_copy(dest: Path) -> Path:
    """The files a fresh clone has (tracked plus new, not ignored), without build outputs or a .venv."""
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           check=True, capture_output=True).stdout.decode().split("\0")
    with tarfile.open(dest / "repo.tar", "w") as tar:
        for name in filter(None, names):
            if (REPO / name).exists():
                tar.add(REPO / name, arcname=name, recursive=False)
    target = dest / "repo"
    target.mkdir()
    with tarfile.open(dest / "repo.tar") as tar:
        tar.extractall(target, filter="tar")
    return target


@pytest.mark.slow
def test_install_on_a_stock_debian_makes_and_uses_a_venv(tmp_path: Path):
    image = _docker_image()
    repo = _repo_copy(tmp_path)
    run = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--user", "root", "--workdir", "/",
         "-v", f"{repo}:/repo:ro", "-v", f"{SOURCES}:/sources:ro", image, "bash", "-c", IN_DEBIAN],
        capture_output=True, text=True, timeout=900)
    output = run.stdout + run.stderr
    print(output[-4000:])
    assert run.returncode == 0, output[-6000:]
    assert "IMPORT-OK /src/" in output and "ACTIVE-VENV-OK" in output, output[-3000:]


def test_this_machine_keeps_python3():
    """Where python3 has pip and no EXTERNALLY-MANAGED marker (this machine, CI) nothing changes: no venv."""
    probe = ("source scripts/python.sh; python3_takes_packages && echo takes; "
             "env -u VIRTUAL_ENV -u PYTHON AGENTGYM_VENV=/nonexistent bash -c 'source scripts/python.sh; agentgym_python'")
    out = subprocess.run(["bash", "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    import importlib.util
    import sys
    import sysconfig

    marked = (Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").exists() and sys.prefix == sys.base_prefix
    if marked or importlib.util.find_spec("pip") is None:
        pytest.skip("this python3 is itself externally managed or has no pip")
    assert out == ["takes", "python3"]
