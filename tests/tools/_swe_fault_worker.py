"""Runs SWE episodes [start, end) with faults injected by episode number; one JSON line per episode.

Used by test_sandbox_faults.py, which SIGKILLs this process at the `parent_kill` episodes and restarts it.
"""
import json
import os
import shutil
import subprocess
import sys

import agentgym

KINDS = ("ok", "timeout", "ok", "killed", "ok", "crash", "ok", "parent_kill", "ok", "oom")


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def kill_sandbox(sandbox):
    """Kill the episode's sandbox from outside: the container through the daemon, or bwrap's workspace."""
    if sandbox.backend == "docker":
        sandbox.container.kill()
    else:
        subprocess.run(["umount", "-l", sandbox.workspace], capture_output=True)
        shutil.rmtree(sandbox.dir, ignore_errors=True)


def episode(env, i):
    kind = KINDS[i % len(KINDS)]
    obs, info = env.reset(seed=i)
    seen = [obs]
    if kind == "timeout":
        seen.append(env.step(call("bash", command="sleep 1000", timeout=1))[0])
    elif kind == "crash":
        seen.append(env.step(call("bash", command="kill -SEGV $$"))[0])
        seen.append(env.step(call("bash", command="python3 -c 'import os; os.abort()'"))[0])
    elif kind == "oom":
        seen.append(env.step(call("bash", command="python3 -c 'x = bytearray(3 * 1024**3)'"))[0])
    elif kind == "killed":
        kill_sandbox(env.unwrapped.sandbox)
    elif kind == "parent_kill":
        print(json.dumps({"episode": i, "kind": kind, "phase": "mid", "pid": os.getpid()}), flush=True)
        env.step(call("bash", command="sleep 10031", timeout=60))  # killed by the driver meanwhile
    last = {}
    for _ in range(3):
        action = env.unwrapped.oracle_action() if kind == "ok" else call("submit")
        obs, reward, terminated, truncated, last = env.step(action or call("submit"))
        seen.append(obs)
        if terminated or truncated:
            break
    text = "\n".join(seen)
    reported = {"ok": True, "timeout": "timed out" in text, "crash": "exit code 134" in text and "exit code 139" in text,
                "oom": "MemoryError" in text or "killed" in text, "killed": bool(last.get("failure"))}[kind]
    return {"episode": i, "kind": kind, "success": bool(last.get("success")), "failure": last.get("failure"),
            "reported": reported}


def main():
    backend, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = agentgym.make("agentgym/SWE-Mini-v0", backend=backend, progress_weight=0.0, memory_mb=512)
    try:
        for i in range(start, end):
            print(json.dumps(episode(env, i)), flush=True)
    finally:
        env.close()


if __name__ == "__main__":
    main()
