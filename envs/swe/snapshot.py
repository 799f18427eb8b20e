"""SWE env snapshots: the episode's fields and the sandbox's workspace files.

A tool call runs to completion (or is killed) inside one `exec`, so no process outlives a turn and the
workspace's files are the sandbox's whole state. The cost is copying /workspace out (snapshot) and wiping it
and copying it back in (restore): about the size of the repository, measured by benchmarks/env_serve_speed.py.
"""
from __future__ import annotations

import pickle
import tempfile
from typing import Any

from agentgym.tools.sandbox.base import extract_tar, tar_directory

FIELDS = ("task", "_failure", "_submitted", "_passed_ever", "_graded_hash", "_hash", "_code_hash", "_fix",
          "_grading", "_last_obs", "_np_random", "_np_random_seed", "_start_files", "_edited", "_last_tests",
          "_bash_used", "_formats")  # _formats: the tool-call format chosen at reset


def take(env: Any) -> bytes:
    if env.sandbox is None:
        raise RuntimeError("call reset() before snapshot(): there is no workspace yet")
    with tempfile.TemporaryDirectory(prefix="agentgym-swe-snapshot-") as tmp:
        env.sandbox.copy_out(".", tmp)
        files = tar_directory(tmp, exclude=())
    state = {name: getattr(env, name) for name in FIELDS if hasattr(env, name)}
    return pickle.dumps(("SWEEnv", state, files), protocol=pickle.HIGHEST_PROTOCOL)


def put(env: Any, data: bytes) -> None:
    owner, state, files = pickle.loads(data)
    if owner != "SWEEnv":
        raise ValueError(f"this snapshot was taken from a {owner}, not an SWEEnv")
    task = state["task"]
    bash_in_this_sandbox = env._bash_used
    if env.sandbox is None or env.task is None or env._pool(env.task) is not env._pool(task):
        env._release()
        env.sandbox = env._pool(task).acquire()
        bash_in_this_sandbox = False
    wiped = env.sandbox.exec("find . -mindepth 1 -delete", timeout_s=120)
    if wiped.exit_code != 0:
        raise RuntimeError(f"could not empty the workspace before restoring: {wiped.output.strip()[-200:]}")
    with tempfile.TemporaryDirectory(prefix="agentgym-swe-restore-") as tmp:
        extract_tar(files, tmp)
        env.sandbox.copy_in(tmp)
    for name, value in state.items():
        setattr(env, name, value)
    # what bash changed outside the workspace stays in a reused sandbox (the env's grading cache needs to know)
    env._bash_used = bool(state.get("_bash_used", False)) or bash_in_this_sandbox
