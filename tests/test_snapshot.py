"""Env snapshots: the optional snapshot()/restore() of the contract, the checker's [snapshot] check (which
must catch an env that forgets part of its state), the turn count, and independent branches."""
import pytest

import agentgym
from agentgym.checker import check_env
from agentgym.envs.toy.keydoor import KeyDoorEnv
from agentgym.errors import CheckError
from agentgym.snapshot import restore, snapshot, supports_snapshot


class ForgetfulKeyDoor(KeyDoorEnv):
    snapshot_fields = ("pos", "key_pos", "door_pos", "done", "task_id")   # forgets has_key


class NoSnapshots(KeyDoorEnv):
    snapshot_fields = ()


def test_check_env_catches_a_snapshot_that_forgets_state():
    with pytest.raises(CheckError, match=r"\[snapshot\].*differs"):
        # seed 2: the oracle-led prefix takes the key before the snapshot, so the forgotten flag matters
        for seed in range(6):
            check_env(lambda: ForgetfulKeyDoor(), seeds=(seed,))


def test_envs_without_snapshots_still_pass():
    report = check_env(lambda: NoSnapshots(), seeds=(0,))
    assert "snapshot" not in report.checks and not supports_snapshot(NoSnapshots())
    with pytest.raises(NotImplementedError):
        NoSnapshots().snapshot()


def test_restore_refuses_another_env_class():
    env = agentgym.make("agentgym/Household-v0")
    env.reset(seed=0)
    other = agentgym.make("agentgym/Toy-KeyDoor-v0")
    other.reset(seed=0)
    with pytest.raises(ValueError, match="taken from a KeyDoorEnv"):
        restore(env.unwrapped, snapshot(other.unwrapped))


def test_turn_limit_counts_from_the_snapshot():
    env = agentgym.make("agentgym/Toy-KeyDoor-v0", max_turns=3)
    env.reset(seed=0)
    env.step("florp")
    saved = snapshot(env)
    assert [env.step("florp")[3] for _ in range(2)] == [False, True]
    restore(env, saved)
    assert [env.step("florp")[3] for _ in range(2)] == [False, True]


def test_household_branches_are_independent():
    env = agentgym.make("agentgym/Household-v0")
    env.reset(seed=4)
    plan = env.unwrapped.oracle_plan()
    for action in plan[:2]:
        env.step(action)
    saved = snapshot(env)
    branches = [agentgym.make("agentgym/Household-v0") for _ in range(3)]
    for branch in branches:
        restore(branch, saved)
    outcomes = [branch.step(plan[2]) for branch in branches]
    assert outcomes[0] == outcomes[1] == outcomes[2]
    for action in plan[3:]:
        *_, info = branches[0].step(action)
    assert info["success"]
    assert branches[1].step(plan[3]) == branches[2].step(plan[3])   # the finished branch changed neither


def test_shop_branches_get_their_own_sessions():
    pytest.importorskip("jinja2")
    env = agentgym.make("agentgym/WebShop-v0", num_products=200)
    env.reset(seed=1)
    for _ in range(2):
        env.step(env.unwrapped.oracle_action())
    saved = snapshot(env)
    a, b = agentgym.make("agentgym/WebShop-v0", num_products=200), agentgym.make("agentgym/WebShop-v0", num_products=200)
    restore(a, saved)
    restore(b, saved)
    assert a.unwrapped.sid != b.unwrapped.sid != env.unwrapped.sid
    while True:   # a buys; b is still on the page the snapshot saw
        obs, reward, terminated, truncated, info = a.step(a.unwrapped.oracle_action())
        if terminated or truncated:
            break
    assert info["success"] and not b.unwrapped.done
    assert b.step(b.unwrapped.oracle_action())[0] == env.step(env.unwrapped.oracle_action())[0]
    for e in (env, a, b):
        e.close()
