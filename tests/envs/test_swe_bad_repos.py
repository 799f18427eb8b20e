"""`agentgym swe make-tasks` on repositories it cannot use: each refused with a one-line reason, through the real
CLI, and nothing left behind (no sandbox workspace, no container, no half-written output)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentgym.tools.sandbox import backend_problem

LIB = "def add(a, b):\n    return a + b\n"


def repo(root, name: str, tests: str | None) -> str:
    path = root / name
    (path / name).mkdir(parents=True)
    (path / name / "__init__.py").write_text("")
    (path / name / "core.py").write_text(LIB)
    if tests is not None:
        (path / "tests").mkdir()
        (path / "tests" / "test_core.py").write_text(f"from {name}.core import add\n\n\n{tests}")
    return str(path)


def sandbox_dirs() -> set[str]:
    from agentgym.tools.sandbox.bwrap import ROOT

    return set(os.listdir(ROOT)) if os.path.isdir(ROOT) else set()


def containers(pid: int) -> list[str]:
    """Containers (running or not) made by the process `pid` (sandboxes label their owner host:pid:start)."""
    from agentgym.tools.sandbox.docker import client, labelled_containers

    prefix = f"{os.uname().nodename}:{pid}:"
    return [container_id for container_id, _, owner in labelled_containers(client()) if owner.startswith(prefix)]


def make_tasks(path: str, backend: str, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-P", "-m", "agentgym", "swe", "make-tasks", path, "--backend", backend, "--no-deps",
            "--max-tasks", "2", *extra]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(timeout=300)
    done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    done.pid = proc.pid  # type: ignore[attr-defined]
    return done


CASES = {
    "no_tests": (None, (), "pytest found no tests"),
    "failing": ("def test_add():\n    assert add(1, 1) == 3\n\n\ndef test_more():\n    assert add(2, 2) == 5\n", (),
                "no test of"),
    "hangs": ("import time\n\n\ndef test_add():\n    assert add(1, 1) == 2\n\n\ndef test_hang():\n"
              "    time.sleep(1000)\n", ("--timeout", "8"), "did not finish in 8 s (a test hangs?)"),
}


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_repository_gets_one_line_and_leaves_nothing(tmp_path, backend, case):
    problem = backend_problem(backend)
    if problem:
        pytest.skip(f"{backend} sandbox unavailable: {problem}")
    tests, extra, reason = CASES[case]
    path = repo(tmp_path, case, tests)
    before = sandbox_dirs()
    done = make_tasks(path, backend, *extra)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and reason in errors[0] and "Traceback" not in done.stderr, done.stderr
    pid_tag = f"{os.uname().nodename}_{done.pid}_"  # bwrap workspaces are named after their owner too
    assert not [d for d in sandbox_dirs() - before if d.startswith(pid_tag)]
    if backend == "docker":
        assert containers(done.pid) == []
    assert not os.path.exists(tmp_path / f"{case}-tasks")  # no output folder for a refused repository


def test_a_50_mb_file_is_refused_before_any_sandbox(tmp_path):
    path = repo(tmp_path, "big", "def test_add():\n    assert add(1, 1) == 2\n")
    with open(os.path.join(path, "data.bin"), "wb") as fh:  # sparse: 50 MB on paper, nothing on disk
        fh.truncate(50 * 2**20)
    before = sandbox_dirs()
    done = make_tasks(path, "auto")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "agentgym swe: error: data.bin is 50.0 MB, over the 20 MB a sandboxed file may have; remove it (data, an "
        "archive?) from a copy of the repository and run again"]
    assert not [d for d in sandbox_dirs() - before if d.startswith(f"{os.uname().nodename}_{done.pid}_")]
    if not backend_problem("docker"):
        assert containers(done.pid) == []


def test_not_a_directory_and_bad_options_are_one_line(tmp_path):
    done = make_tasks(str(tmp_path / "nowhere"), "bwrap")
    assert done.returncode == 2 and "is not a directory" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = make_tasks(str(tmp_path), "bwrap", "--timeout", "-3")
    assert done.returncode == 2 and "--timeout must be > 0" in done.stderr


def test_a_suite_whose_summary_is_larger_than_a_commands_output_is_read_whole(tmp_path):
    """more-itertools' -rA summary (+ subtest progress) is ~90 kB, beyond the 64 kB an exec keeps by default."""
    if backend_problem("bwrap"):
        pytest.skip(f"bwrap sandbox unavailable: {backend_problem('bwrap')}")
    from agentgym.envs.swe.testing import run_pytest
    from agentgym.tools.sandbox import make_sandbox

    tests = ("import pytest\n\n\n@pytest.mark.parametrize('case', [f'{i:04d}' + 'x' * 60 for i in range(1500)])\n"
             "def test_add_with_a_rather_long_descriptive_name(case):\n    assert add(1, 1) == 2\n")
    path = repo(tmp_path, "wide", tests)
    with make_sandbox("bwrap") as sandbox:
        sandbox.copy_in(path)
        run = run_pytest(sandbox, timeout_s=120)
    assert len(run.output) > 150_000
    assert len(run.statuses) == 1500 and set(run.statuses.values()) == {"PASSED"}
