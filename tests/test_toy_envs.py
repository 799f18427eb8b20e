"""The toy envs: the key-and-door corridor and the calculator task."""
import json
from collections import Counter

import pytest

import agentgym
from agentgym.envs.toy.calculator import safe_eval
from agentgym.envs.toy.keydoor import COMMANDS, KeyDoorEnv


def play_oracle(env, seed):
    obs, info = env.reset(seed=seed)
    anchors, total = [info["anchor"]], 0.0
    for _ in range(50):
        obs, reward, terminated, truncated, info = env.step(env.oracle_action())
        assert info["valid_action"]
        anchors.append(info["anchor"])
        total += reward
        if terminated or truncated:
            return info["success"], total, anchors
    raise AssertionError("the oracle never finished")


@pytest.mark.parametrize("env_id", ["agentgym/Toy-KeyDoor-v0", "agentgym/Toy-KeyDoor-Long-v0"])
def test_keydoor_oracle_solves_every_task_in_several_turns(env_id):
    env = agentgym.make(env_id)
    for seed in range(20):
        success, total, anchors = play_oracle(env, seed)
        assert success and total == 1.0 and len(anchors) >= 3


def test_keydoor_correct_action_depends_on_the_observation():
    env = KeyDoorEnv(length=4)
    firsts = Counter()
    for seed in range(30):
        env.reset(seed=seed)
        firsts[env.oracle_action()] += 1
    assert len(firsts) >= 2  # no single fixed first move solves every task


def test_keydoor_anchors_repeat_across_rollouts_of_one_task():
    env = agentgym.make("agentgym/Toy-KeyDoor-v0")
    seen = Counter()
    for rollout in range(4):
        obs, info = env.reset(seed=5)
        seen[info["anchor"]] += 1
        for action in ["left", "right", "left", "take key", "right"][: rollout + 2]:
            _, _, terminated, truncated, info = env.step(action)
            seen[info["anchor"]] += 1
            if terminated or truncated:
                break
    assert max(seen.values()) >= 4  # step groups for GiGPO are non-trivial


def test_keydoor_invalid_commands_and_tags():
    env = KeyDoorEnv(length=4)
    env.reset(seed=1)
    obs, reward, _, _, info = env.step("dance")
    assert not info["valid_action"] and "Unknown command 'dance'" in obs and reward == 0.0
    assert all(c in obs for c in COMMANDS)
    obs, _, _, _, info = env.step("open door")
    assert not info["valid_action"] and "cannot open door here" in obs
    obs, _, _, _, info = env.step("<action> Left. </action>")  # tag, case and period tolerated
    assert info["valid_action"]
    assert set(info["admissible_actions"]) <= set(COMMANDS)


def test_keydoor_locked_door_and_reward_components():
    env = KeyDoorEnv(length=3, step_penalty=0.01, key_bonus=0.2)
    env.reset(seed=0)
    env.door_pos, env.key_pos, env.pos = 0, 2, 0  # stand at the door without the key
    obs, reward, terminated, _, info = env.step("open door")
    assert "locked" in obs and not terminated and not info["valid_action"] and reward == pytest.approx(-0.01)
    env.pos = 2
    _, reward, _, _, info = env.step("take key")
    assert info["reward_components"] == {"step": -0.01, "key": 0.2} and reward == pytest.approx(0.19)
    env.pos = 0
    obs, reward, terminated, _, info = env.step("open door")
    assert terminated and info["success"] and "You win" in obs and reward == pytest.approx(0.99)
    assert env.render() == "@.." + " (key)"
    with pytest.raises(ValueError, match="length must be >= 2"):
        KeyDoorEnv(length=1)


def test_keydoor_seeds_fix_the_task():
    env = KeyDoorEnv(length=6)
    tasks = {env.reset(seed=s)[1]["task_id"] for s in range(30)}
    assert len(tasks) >= 4
    assert env.reset(seed=7) == env.reset(seed=7)


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_calculator_tool_then_answer():
    env = agentgym.make("agentgym/Toy-Calculator-v0")
    question, info = env.reset(seed=3)
    a, b, c = (int(x) for x in question.removeprefix("What is ").rstrip("?").replace("*", "+").split("+"))
    obs, reward, terminated, _, info = env.step(call("calculate", expression=f"{a} * {b} + {c}"))
    assert obs == f"<tool_response>\n{a * b + c}\n</tool_response>" and reward == pytest.approx(0.1)
    assert info["reward_components"] == {"tool": 0.1} and not terminated
    _, reward, _, _, _ = env.step(call("calculate", expression=f"{a} * {b} + {c}"))
    assert reward == 0.0  # the tool bonus is paid once
    _, reward, terminated, _, info = env.step(call("answer", text=str(a * b + c)))
    assert terminated and info["success"] and reward == 1.0


def test_calculator_tag_answer_wrong_answer_and_errors():
    env = agentgym.make("agentgym/Toy-Calculator-v0")
    env.reset(seed=0)
    obs, _, _, _, info = env.step(call("calculate", expression="__import__('os')"))
    assert not info["valid_action"] and "only integers" in obs
    obs, _, _, _, info = env.step(call("calculate", expression="1 // 0"))
    assert "division by zero" in obs and not info["valid_action"]
    _, reward, terminated, _, info = env.step("<answer>-1</answer>")
    assert terminated and not info["success"] and reward == 0.0 and info["reward_components"] == {"outcome": 0.0}
    env.reset(seed=0)
    _, reward, _, _, info = env.step(f"<answer>{env.unwrapped.target}.</answer>")
    assert info["success"] and reward == 1.0


@pytest.mark.parametrize("expression, value", [("(3 + 4) * 5", 35), ("-2 * 3", -6), ("17 % 5", 2), ("7 // 2", 3)])
def test_safe_eval(expression, value):
    assert safe_eval(expression) == value


@pytest.mark.parametrize("expression", ["2 ** 8", "x + 1", "1.5 * 2", "True + 1", "9" * 201, "10**20 * 10**20",
                                        "99999999999999999 * 99999999999999999"])
def test_safe_eval_rejects(expression):
    with pytest.raises(ValueError):
        safe_eval(expression)
