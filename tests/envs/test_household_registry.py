"""Household ids, suites, `agentgym check` and `agentgym play`."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

import agentgym
from agentgym.envs.household.catalog import TASK_SHORT, TASK_TYPES
from agentgym.registration import list_envs, make, suite

IDS = ["agentgym/Household-v0"] + [f"agentgym/Household-{s}-v0" for s in TASK_SHORT.values()]


def test_ids_and_suite():
    assert set(IDS) <= set(list_envs("agentgym/Household"))
    entries = suite("household")
    assert sorted(e.env_id for e in entries) == sorted(IDS[1:])


@pytest.mark.parametrize("env_id, task_type", list(zip(IDS[1:], TASK_TYPES)))
def test_each_task_id_makes_only_its_task_type(env_id, task_type):
    env = make(env_id)
    for seed in range(5):
        env.reset(seed=seed)
        assert env.unwrapped.world.task.task_type == task_type
    assert env.max_turns == 50


def test_make_family_and_oracle_through_the_turn_limit():
    env = make("agentgym/Household-v0", max_turns=40, split="test_seen")
    _, info = env.reset(seed=1)
    while True:
        _, _, terminated, truncated, info = env.step(env.oracle_action())
        if terminated or truncated:
            break
    assert info["success"] and not truncated


@pytest.mark.skipif(importlib.util.find_spec("agentgym.checker") is None, reason="agentgym.checker not built yet")
@pytest.mark.parametrize("env_id", IDS)
def test_agentgym_check_passes(env_id):
    from agentgym.checker import check_env

    report = check_env(env_id)
    assert "oracle" in report.checks and "any string" in report.checks


@pytest.mark.skipif(importlib.util.find_spec("agentgym.cli_envs") is None, reason="agentgym.cli_envs not built yet")
def test_agentgym_play_in_a_terminal():
    env = make("agentgym/Household-v0")
    env.reset(seed=0)
    plan = env.unwrapped.oracle_plan()
    result = subprocess.run([sys.executable, "-m", "agentgym", "play", "agentgym/Household-v0", "--seed", "0"],
                            input="\n".join(plan) + "\n", capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "You completed the task!" in result.stdout


def test_import_agentgym_stays_light():
    code = "import sys, agentgym, agentgym.envs; print(any(m in sys.modules for m in ('textworld', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
    assert agentgym
