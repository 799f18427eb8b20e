"""Infrastructure faults on the rollout side (issue 51): an env server SIGKILLed and restarted mid-rollout, and
one SIGSTOPped (hung), each a real `agentgym serve env` process on loopback. Only the episodes that were playing
on it fail, each recorded with its cause (end_reason "failed", outcome "error", the error text); episodes that
ended before are whole; the rollout ends in bounded time; the next rollout plays on the same env objects (a
reset opens a fresh session). What the trainer then does with such episodes is train/'s: they say nothing about
the agent and must leave their group (docs/guide/faults.md)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from agentgym.policies.scripted import ScriptedPolicy
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.engine.vector import make_pool

pytestmark = pytest.mark.slow  # each starts an env server process (a few seconds), one starts two

KEYDOOR = "agentgym/Toy-KeyDoor-v0"  # the oracle ends an episode in 5 turns; the turn limit is 10


def _serve(port: int = 0) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "agentgym", "serve", "env", KEYDOOR, "--port", str(port)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("serving "), line
    return proc, line.split(" at ")[1].split()[0]


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGCONT)  # a stopped server cannot act on SIGKILL's cleanup otherwise
    proc.kill()
    proc.wait(timeout=30)


class _HalfFinishPolicy(ScriptedPolicy):
    """Even-numbered envs (in order of first request) play the oracle and finish at turn 5; odd ones wander to
    the turn limit. `fault()` runs once, when a wandering episode asks for its action at `at_turn`."""

    def __init__(self, fault, at_turn: int = 6):
        super().__init__(self._act)
        self.fault, self.at_turn, self.fired = fault, at_turn, False
        self.order: dict[int, int] = {}
        self.turns: dict[int, int] = {}

    def _act(self, ctx) -> str:
        key = id(ctx.env)
        index = self.order.setdefault(key, len(self.order))
        self.turns[key] = self.turns.get(key, 0) + 1
        if index % 2 == 0:
            return ctx.env.unwrapped.oracle_action()
        if self.turns[key] == self.at_turn + 1 and not self.fired:
            self.fired = True
            self.fault()
        return "florp"

    def reset_counts(self) -> None:
        self.order.clear()
        self.turns.clear()


def _play(pool, policy) -> list:
    return rollout(pool, policy, None, [0, 1, 2, 3], 1, RolloutConfig(max_turns=10))


def _check_the_fault_touched_only_the_wanderers(trajs, cause: str) -> None:
    finished, hit = trajs[0::2], trajs[1::2]  # slots 0, 2 played the oracle (the policy numbers envs in order)
    assert all(t.success and t.end_reason == "terminated" and t.error is None for t in finished)
    for t in hit:
        assert t.end_reason == "failed" and t.outcome == "error" and cause in t.error, t.error
        assert len(t.turns) >= 6  # the turns played before the fault are kept with the failure


def test_an_env_server_killed_and_restarted_mid_rollout_fails_only_the_episodes_on_it():
    proc, url = _serve()
    port = int(url.rsplit(":", 1)[1])
    state = {"proc": proc}

    def kill_and_restart() -> None:
        state["proc"].kill()
        state["proc"].wait(timeout=30)
        state["proc"], again = _serve(port)  # the same address: the restarted server knows no session
        assert again == url

    pool = make_pool(f"remote:{url}/{KEYDOOR}", 4, "serial", 1, None, 10, None)
    try:
        policy = _HalfFinishPolicy(kill_and_restart)
        trajs = _play(pool, policy)
        assert policy.fired
        _check_the_fault_touched_only_the_wanderers(trajs, "no_session")
        # the run goes on: the next rollout on the same envs opens fresh sessions on the restarted server
        policy.reset_counts()
        policy.at_turn = 99
        again = _play(pool, policy)
        assert all(t.error is None for t in again) and [t.success for t in again] == [True, False, True, False]
    finally:
        pool.close()
        _stop(state["proc"])


def test_a_stopped_env_server_times_out_the_episodes_on_it_in_bounded_time():
    proc, url = _serve()
    # one second per call instead of a minute
    pool = make_pool(f"remote:{url}/{KEYDOOR}", 4, "serial", 1, {"step_timeout_s": 1.0, "connect_timeout_s": 1.0},
                     10, None)
    try:
        policy = _HalfFinishPolicy(lambda: proc.send_signal(signal.SIGSTOP))
        t0 = time.monotonic()
        trajs = _play(pool, policy)
        elapsed = time.monotonic() - t0
        _check_the_fault_touched_only_the_wanderers(trajs, "timed out")
        assert elapsed < 2 * 1.0 + 10  # each wandering episode waits out one time limit, then fails
        proc.send_signal(signal.SIGCONT)
        policy.reset_counts()
        policy.at_turn = 99
        again = _play(pool, policy)
        assert all(t.error is None for t in again)
    finally:
        pool.close()
        _stop(proc)
