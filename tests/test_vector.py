"""Env pools: the same results on every executor; one env's fault never breaks the others."""
from __future__ import annotations

import os
import signal

import pytest

from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.engine.vector import EnvFailure, ResetResult, StepResult, env_turn_limit, make_pool

pytestmark = pytest.mark.ray  # its Ray session: one machine-wide Ray at a time (tests/xdist_groups.py)

KEYDOOR = "agentgym/Toy-KeyDoor-v0"


def _episode(pool, n):
    resets = pool.reset([(i, i, None) for i in range(n)])
    steps = pool.step([(i, "right") for i in reversed(range(n))])  # results follow the given order
    return [(r.obs, r.info["task_id"], r.max_turns, r.env_id) for r in resets], [(s.obs, s.reward) for s in steps]


@pytest.mark.parametrize("executor", ["serial", "thread", "process"])
def test_executors_agree(executor):
    with make_pool(KEYDOOR, 4, "serial") as reference:
        expected = _episode(reference, 4)
    with make_pool(KEYDOOR, 4, executor, workers=2) as pool:
        assert _episode(pool, 4) == expected
        assert isinstance(pool.step_one(0, "left"), StepResult)
        assert isinstance(pool.reset_one(1, 3), ResetResult)
        assert pool.handle(1).oracle_action() in ("left", "right", "take key", "open door")


def test_reset_result_carries_system_prompt_tools_and_limit():
    with make_pool("agentgym/Toy-Calculator-v0", 1, "serial", max_turns=2) as pool:
        [result] = pool.reset([(0, 0, None)])
    assert result.max_turns == 2 and "arithmetic" in result.instructions
    assert [t["function"]["name"] for t in result.tools] == ["calculate", "answer"]


def test_garbage_actions_and_step_errors_become_results_not_exceptions():
    with make_pool(KEYDOOR, 2, "thread") as pool:
        pool.reset([(0, 0, None), (1, 1, None)])
        [garbage] = pool.step([(0, "\x00" * 10_000)])
        assert isinstance(garbage, StepResult) and garbage.info["valid_action"] is False
        pool.envs[1].env.step = None  # an env bug: calling it raises TypeError
        out = pool.step([(0, "left"), (1, "left")])
    assert isinstance(out[0], StepResult)
    assert isinstance(out[1], EnvFailure) and "TypeError" in out[1].message


def test_dead_worker_fails_only_its_envs():
    with make_pool(KEYDOOR, 4, "process", workers=2) as pool:
        pool.reset([(i, i, None) for i in range(4)])
        os.kill(pool.workers[1].process.pid, signal.SIGKILL)  # envs 1 and 3 live in worker 1
        pool.workers[1].process.join(5)
        out = pool.step([(i, "left") for i in range(4)])
        assert [type(r).__name__ for r in out] == ["StepResult", "EnvFailure", "StepResult", "EnvFailure"]
        assert "died" in out[1].message
        assert isinstance(pool.step_one(3, "left"), EnvFailure)  # stays failed, answers at once


def test_bad_pool_arguments():
    with pytest.raises(ConfigError, match="executor"):
        make_pool(KEYDOOR, 1, "fibers")
    with pytest.raises(ConfigError, match="at least one"):
        make_pool(KEYDOOR, 0)
    with pytest.raises(ConfigError, match="building env"):
        make_pool("agentgym/No-Such-v0", 1, "process")


def test_ray_pool_needs_ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependencyError, match="agentgym\\[ray\\]"):
            make_pool(KEYDOOR, 2, "ray")
        return
    with make_pool(KEYDOOR, 2, "ray", workers=1) as pool:  # where ray is installed, it works like the rest
        with make_pool(KEYDOOR, 2, "serial") as reference:
            assert _episode(pool, 2) == _episode(reference, 2)


def test_turn_limit_lookup():
    from agentgym.registration import make

    assert env_turn_limit(make(KEYDOOR)) == 10
    assert env_turn_limit(make(KEYDOOR, max_turns=3)) == 3
