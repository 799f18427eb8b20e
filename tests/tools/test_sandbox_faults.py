"""100 SWE episodes with faults injected (60 on bwrap, 40 on docker): killed sandboxes, timeouts, crashing and
memory-hogging commands, and the parent process SIGKILLed mid-episode and restarted.

Afterwards: no leaked containers, workspaces or processes; every fault is reported as its episode's
failure; every other episode succeeds. `AGENTGYM_FAULT_EPISODES=N` runs N per back end instead.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from agentgym.tools.sandbox import backend_problem

WORKER = os.path.join(os.path.dirname(__file__), "_swe_fault_worker.py")
EPISODES = {"bwrap": 60, "docker": 40}
if os.environ.get("AGENTGYM_FAULT_EPISODES"):
    EPISODES = dict.fromkeys(EPISODES, int(os.environ["AGENTGYM_FAULT_EPISODES"]))
BACKENDS = [pytest.param("bwrap", id="bwrap"), pytest.param("docker", id="docker", marks=pytest.mark.docker)]


def run_episodes(backend: str, n: int) -> tuple[dict[int, dict], list[int]]:
    """Drive workers through episodes 0..n-1, killing the worker at each parent_kill episode."""
    results: dict[int, dict] = {}
    worker_pids: list[int] = []
    start = 0
    while start < n:
        proc = subprocess.Popen(["nice", sys.executable, WORKER, backend, str(start), str(n)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        worker_pids.append(proc.pid)
        next_start = n
        for line in proc.stdout:
            row = json.loads(line)
            if row.get("phase") == "mid":
                time.sleep(0.3)
                proc.kill()  # SIGKILL: no atexit, no finally; the next worker must clean up after this one
                results[row["episode"]] = {**row, "success": False, "reported": True, "failure": "parent killed"}
                next_start = row["episode"] + 1
                break
            results[row["episode"]] = row
        proc.wait(timeout=120)
        stderr = proc.stderr.read()
        if next_start == n and proc.returncode != 0:
            raise AssertionError(f"worker failed: {stderr[-2000:]}")
        start = next_start
    return results, worker_pids


def leftovers(backend: str, worker_pids: list[int]) -> list[str]:
    found = []
    ps = subprocess.run(["pgrep", "-af", "sleep 10031|sleep 1000$"], capture_output=True, text=True).stdout
    found += [f"process {line}" for line in ps.splitlines() if "pgrep" not in line]
    if backend == "docker":
        from agentgym.tools.sandbox.docker import client, labelled_containers

        owners = {str(p) for p in worker_pids}
        found += [f"container {name}" for _, name, owner in labelled_containers(client())
                  if (owner or "::").split(":")[1] in owners]
    from agentgym.tools.sandbox.bwrap import ROOT

    if os.path.isdir(ROOT):
        found += [f"workspace {n}" for n in os.listdir(ROOT) if n.split("_")[1] in {str(p) for p in worker_pids}]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_episodes_with_faults_leak_nothing_and_affect_no_other_episode(backend):
    problem = backend_problem(backend)
    if problem:
        pytest.skip(f"{backend} sandbox unavailable: {problem}")
    n = EPISODES[backend]
    results, worker_pids = run_episodes(backend, n)
    assert sorted(results) == list(range(n))
    for i, row in sorted(results.items()):
        if row["kind"] == "ok":
            assert row["success"] and not row["failure"], row  # untouched by the faults around it
        else:
            assert row["reported"] and not row["success"], row  # each fault is its own episode's failure
    assert sum(r["kind"] == "parent_kill" for r in results.values()) == n // 10
    # the last worker exited normally; its start-up reaped what the killed ones left
    deadline = time.monotonic() + 20
    while (left := leftovers(backend, worker_pids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == []
