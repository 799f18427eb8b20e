"""A sandbox stopped from outside mid-episode (SIGSTOP, as a host under pressure or a freezer does; issue 51):
the command's result is unknown, so that episode fails as an infrastructure failure (outcome "error", the
cause in its error), not as the agent's; the other episodes of the batch and the sandbox's next command are
untouched. A command that merely hangs still times out as the agent's own doing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from agentgym.tools.sandbox import backend_problem

pytestmark = pytest.mark.slow
if backend_problem("bwrap"):
    pytest.skip(f"bwrap sandbox unavailable: {backend_problem('bwrap')}", allow_module_level=True)


def stop_when_running(marker: str, after_s: float = 0.5) -> threading.Thread:
    """SIGSTOP every process group running `marker` (the sandbox's bwrap and what it runs), once it runs."""
    def stop() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pids = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
            if pids:
                time.sleep(after_s)
                for group in {os.getpgid(int(p)) for p in pids if os.path.exists(f"/proc/{p}")}:
                    os.killpg(group, signal.SIGSTOP)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=stop, daemon=True)
    thread.start()
    return thread


def test_a_stopped_command_is_the_sandboxs_failure_and_a_hung_one_the_agents():
    from agentgym.tools.sandbox import SandboxFrozen, make_sandbox

    box = make_sandbox("bwrap")
    try:
        stopper = stop_when_running("sleep 1771")
        with pytest.raises(SandboxFrozen, match=r"stopped from outside \(SIGSTOP\).*3 s timeout"):
            box.exec("sleep 1771", timeout_s=3)
        stopper.join()
        assert box.exec("echo after").output == "after\n"   # the sandbox goes on
        hung = box.exec("sleep 1772", timeout_s=1)           # the agent's own hang: a timeout it sees
        assert hung.timed_out and not hung.ok
        assert subprocess.run(["pgrep", "-f", "sleep 177[12]"], capture_output=True).returncode == 1  # none left
    finally:
        box.close()


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_only_the_stopped_episode_fails_recorded_with_its_cause():
    """Three SWE episodes on bwrap, played by the env's oracle; seed 1 first runs a command whose sandbox is
    stopped. Its trajectory is an infrastructure failure naming the cause; the other two solve their task."""
    from agentgym.engine.rollout import RolloutConfig, rollout
    from agentgym.policies.scripted import ScriptedPolicy
    from agentgym.trajectory import split_groups

    import agentgym

    def act(context) -> str:
        env = context.env.unwrapped
        if env.seed_played == 1 and not env.stopped_once:   # its first command: the sandbox is stopped under it
            env.stopped_once = True
            stop_when_running("sleep 1773")
            return call("bash", command="sleep 1773", timeout=3)
        return env.oracle_action() or call("submit")

    def make_env():
        """The registered SWE env, told which seed it plays (the script reads it)."""
        env = agentgym.make("agentgym/SWE-Mini-Bwrap-v0", progress_weight=0.0)
        reset = env.reset

        def reset_noting_the_seed(*, seed=None, options=None):
            env.unwrapped.seed_played, env.unwrapped.stopped_once = seed, False
            return reset(seed=seed, options=options)

        env.reset = reset_noting_the_seed
        return env

    trajectories = rollout(make_env, ScriptedPolicy(act), None, [0, 1, 2], 1,
                           RolloutConfig(max_turns=8, executor="serial"))
    by_seed = {t.seed: t for g in split_groups(trajectories) for t in g}
    stopped = by_seed[1]
    assert stopped.outcome == "error" and "stopped from outside (SIGSTOP)" in (stopped.error or ""), stopped.error
    assert by_seed[0].outcome == "success" and by_seed[2].outcome == "success"
