"""A sandbox stopped from outside mid-episode (SIGSTOP, as a host under pressure or a freezer does; issue 51):
the command's result is unknown, so that episode fails as an infrastructure failure (outcome "error", the
cause in its error), not as the agent's; the other episodes of the batch and the sandbox's next command are
untouched. A command that merely hangs still times out as the agent's own doing. On Docker (where a daemon
runs): a container paused under a command, and warm pool containers a daemon restart stopped."""
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


def needs(backend: str) -> None:
    problem = backend_problem(backend)
    if problem:
        pytest.skip(f"{backend} sandbox unavailable: {problem}")


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

    needs("bwrap")
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
    needs("bwrap")
    by_seed = _play_three("agentgym/SWE-Mini-Bwrap-v0", lambda env: stop_when_running("sleep 1773"), "sleep 1773")
    stopped = by_seed[1]
    assert stopped.outcome == "error" and "stopped from outside (SIGSTOP)" in (stopped.error or ""), stopped.error
    assert by_seed[0].outcome == "success" and by_seed[2].outcome == "success"


@pytest.mark.docker
def test_a_container_paused_mid_command_fails_only_its_episode():
    """The same three episodes on Docker; seed 1's container is paused (the cgroup freezer) under its first
    command: that episode is an infrastructure failure naming the paused container, the others succeed."""
    needs("docker")

    def pause_soon(env):
        box = env.sandbox
        threading.Thread(target=lambda: (time.sleep(1.0), box.container.pause()), daemon=True).start()

    by_seed = _play_three("agentgym/SWE-Mini-v0", pause_soon, "sleep 1774", backend="docker")
    paused = by_seed[1]
    assert paused.outcome == "error" and "paused" in (paused.error or ""), paused.error
    assert by_seed[0].outcome == "success" and by_seed[2].outcome == "success"


@pytest.mark.docker
def test_warm_containers_a_daemon_restart_stopped_are_never_handed_out():
    """A daemon restart stops every container (without live-restore), the pool's warm ones too: the next
    episode must get a running one, not fail on a dead one (by hand: a real `dockerd` restart between
    episodes failed the next episode with 409 "container is not running" before this). Stopped here with
    `docker stop`, which is what the restart does to them, so the test does not restart a shared daemon."""
    needs("docker")
    from agentgym.tools.sandbox.docker import DockerPool

    pool = DockerPool(size=2)
    try:
        deadline = time.monotonic() + 120
        while len(pool._ready) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(pool._ready) == 2
        for container in list(pool._ready):
            container.stop(timeout=1)
        box = pool.acquire()
        try:
            assert box.alive() and box.exec("echo fine").output == "fine\n"
        finally:
            box.close()
    finally:
        pool.close()


def _play_three(env_id: str, fault, marker: str, **env_kwargs):
    """Seeds 0-2 of `env_id` played by its oracle; seed 1 first runs `marker` (a sleep, timeout 3 s) with
    `fault(env)` injected as it starts. The trajectories by seed."""
    from agentgym.engine.rollout import RolloutConfig, rollout
    from agentgym.policies.scripted import ScriptedPolicy
    from agentgym.trajectory import split_groups

    import agentgym

    def act(context) -> str:
        env = context.env.unwrapped
        if env.seed_played == 1 and not env.stopped_once:   # its first command: the fault strikes under it
            env.stopped_once = True
            fault(env)
            return call("bash", command=marker, timeout=3)
        return env.oracle_action() or call("submit")

    def make_env():
        """The registered SWE env, told which seed it plays (the script reads it)."""
        env = agentgym.make(env_id, progress_weight=0.0, **env_kwargs)
        reset = env.reset

        def reset_noting_the_seed(*, seed=None, options=None):
            env.unwrapped.seed_played, env.unwrapped.stopped_once = seed, False
            return reset(seed=seed, options=options)

        env.reset = reset_noting_the_seed
        return env

    trajectories = rollout(make_env, ScriptedPolicy(act), None, [0, 1, 2], 1,
                           RolloutConfig(max_turns=8, executor="serial"))
    return {t.seed: t for g in split_groups(trajectories) for t in g}
