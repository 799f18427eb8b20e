"""The SWE env on both real back ends: oracle solves, rewards, anchors, hidden tests, bad input, checker."""
from __future__ import annotations

import json

import pytest

import agentgym
from agentgym.envs.swe.sources import MINI_TASKS
from agentgym.envs.swe.tasks import load_tasks
from agentgym.tools.sandbox import backend_problem

BACKENDS = [pytest.param("bwrap", id="bwrap"), pytest.param("docker", id="docker", marks=pytest.mark.docker)]


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    problem = backend_problem(request.param)
    if problem:
        pytest.skip(f"{request.param} sandbox unavailable: {problem}")
    return request.param


@pytest.fixture(scope="module")
def env(backend):
    made = agentgym.make("agentgym/SWE-Mini-v0", backend=backend)
    yield made
    made.close()


def solve(env, task_id):
    obs, info = env.reset(seed=0, options={"task_id": task_id})
    total, steps = 0.0, []
    for _ in range(4):
        obs, reward, terminated, truncated, info = env.step(env.oracle_action())
        assert info["valid_action"], obs
        assert sum(info["reward_components"].values()) == pytest.approx(reward)
        total += reward
        steps.append(info)
        if terminated:
            break
    return total, steps


def test_oracle_solves_mini_tasks(env, backend):
    tasks = load_tasks(MINI_TASKS)
    chosen = tasks[::4]  # a spread over both repositories and several mutation kinds (all are checked in the slow test)
    for task in chosen:
        total, steps = solve(env, task.instance_id)
        assert steps[-1]["success"], task.instance_id
        assert steps[-1]["reward_components"]["outcome"] == 1.0
        assert total == pytest.approx(1.5)  # progress 0.5 over the episode + outcome 1
        assert steps[0]["reward_components"]["progress"] == pytest.approx(0.5)  # the fix turn made F2P pass


def test_submitting_the_bug_fails_and_anchor_tracks_the_workspace(env):
    task = load_tasks(MINI_TASKS)[0]
    obs, info = env.reset(seed=0, options={"task_id": task.instance_id})
    assert task.problem_statement in obs and info["task_id"] == task.instance_id
    start_anchor = info["anchor"]
    obs, reward, terminated, _, info = env.step(call("view_file", path=task.fail_to_pass[0].split("::")[0]))
    assert info["anchor"] == start_anchor and reward == 0.0 and "def test_" in obs  # reading changes nothing
    obs, reward, terminated, _, info = env.step(call("bash", command="echo x > scratch.txt"))
    changed = info["anchor"]
    assert changed != start_anchor
    obs, reward, terminated, _, info = env.step(call("bash", command="rm scratch.txt"))
    assert info["anchor"] == start_anchor  # same files, same anchor: GiGPO groups these states
    obs, reward, terminated, _, info = env.step(call("submit"))
    assert terminated and not info["success"] and reward == 0.0


def test_same_task_same_anchor_across_resets(env):
    _, first = env.reset(seed=5)
    _, second = env.reset(seed=5)
    assert first["anchor"] == second["anchor"] and first["task_id"] == second["task_id"]


def test_editing_tests_does_not_help_and_hidden_versions_are_restored(env):
    task = load_tasks(MINI_TASKS)[0]
    env.reset(seed=0, options={"task_id": task.instance_id})
    test_file = task.fail_to_pass[0].split("::")[0]
    env.step(call("create_file", path=test_file, content="def test_nothing():\n    pass\n"))
    obs, reward, terminated, _, info = env.step(call("submit"))
    assert terminated and not info["success"]
    assert env.unwrapped.sandbox.read_file(test_file) == b"def test_nothing():\n    pass\n"  # the agent's file is back


def test_bad_input_gets_feedback(env):
    env.reset(seed=1)
    for action, expect in [("no tool call here", "No tool call"), (call("str_replace", path="missing.py", old_str="a",
                                                                        new_str="b"), "no such file"),
                           (call("view_file", path="../../etc/passwd"), "outside"),
                           (call("bash"), "missing required"), ("<tool_call>{not json", "Error"),
                           (call("frobnicate", x=1), "unknown tool")]:
        obs, reward, terminated, _, info = env.step(action)
        assert not info["valid_action"] and expect in obs, (action, obs)
        assert not terminated
    obs, *_ , info = env.step(call("bash", command="kill -SEGV $$"))
    assert info["valid_action"] and "exit code" in obs


def test_run_tests_reports_failures(env):
    task = load_tasks(MINI_TASKS)[2]
    env.reset(seed=0, options={"task_id": task.instance_id})
    obs, reward, *_ = env.step(call("run_tests"))
    assert "FAILED" in obs and task.fail_to_pass[0] in obs and " in 0." not in obs
    assert reward == 0.0


def test_state_summary_shows_the_diff_and_the_last_test_run(env):
    """What the fold layout shows in place of the turns it folds away (agentgym.engine.folding)."""
    task = load_tasks(MINI_TASKS)[2]
    env.reset(seed=0, options={"task_id": task.instance_id})
    assert env.state_summary() == "No file changed yet.\nNo test run yet."
    env.step(call("run_tests"))
    assert "Last test run:" in env.state_summary() and "failed" in env.state_summary()
    env.step(env.oracle_action())  # the fix: the grader runs the tests, the diff shows the edit
    summary = env.state_summary()
    assert summary.startswith("Changes so far:\n--- a/") and "\n+" in summary and "\n-" in summary
    assert "(graded with the task's tests)" in summary


@pytest.mark.slow
def test_oracle_solves_every_shipped_task(env, backend):
    if backend != "bwrap":
        pytest.skip("once per task is enough: the bwrap run covers every shipped task")
    for task in load_tasks(MINI_TASKS):
        total, steps = solve(env, task.instance_id)
        assert steps[-1]["success"] and total == pytest.approx(1.5), task.instance_id


def test_the_same_workspace_is_graded_once_until_bash_runs(env, monkeypatch):
    """The fix turn of the same task twice: one pytest run, the same reward. After a bash call the episode
    grades for real again (bash can change the sandbox outside the hashed workspace)."""
    cls = type(env.unwrapped)
    real_grade, gradings = cls._grade, []
    monkeypatch.setattr(cls, "_grade", lambda self: gradings.append(self._hash) or real_grade(self))
    env.unwrapped._grades.clear()  # earlier tests on this module's env graded the same fix

    def fix_turn(*before: str) -> float:
        env.reset(seed=0)
        for action in before:
            env.step(action)
        _, reward, _, _, info = env.step(env.unwrapped.oracle_action())
        assert info["valid_action"]
        return reward

    first, again = fix_turn(), fix_turn()
    assert len(gradings) == 1 and first == again == pytest.approx(0.5)
    assert fix_turn(call("bash", command="true")) == pytest.approx(0.5) and len(gradings) == 2


# `check_env` (oracle included) runs on every registered id in tests/test_all_envs.py: SWE-Mini-v0 (docker
# where dockerd runs), SWE-Mini-Bwrap-v0 and SWE-Lib-v0.


def test_snapshot_restores_the_workspace_and_the_episode(env, backend):
    """The workspace's files and the episode's fields come back, in this env and in a fresh one."""
    env.reset(seed=1)
    env.step(call("create_file", path="notes.txt", content="before"))
    saved = env.snapshot()
    env.step(call("create_file", path="notes.txt", content="after"))
    env.step(call("bash", command="rm -rf ./*"))
    env.restore(saved)
    assert "before" in env.step(call("bash", command="cat notes.txt"))[0]
    fresh = agentgym.make("agentgym/SWE-Mini-v0", backend=backend)
    try:
        fresh.reset(seed=2)
        fresh.restore(saved)
        listing = fresh.step(call("bash", command="cat notes.txt; ls"))[0]
        assert "before" in listing and fresh.unwrapped.task.instance_id == env.unwrapped.task.instance_id
        _, reward, terminated, _, info = fresh.step(fresh.unwrapped.oracle_action())
        while not terminated:
            _, reward, terminated, _, info = fresh.step(fresh.unwrapped.oracle_action())
        assert info["success"]
    finally:
        fresh.close()
