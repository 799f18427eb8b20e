"""`agentgym/MCP-v0`: a generic env over a real MCP server (the tests' demo server and the bundled facts
server), configured inline or from YAML, graded by checkers, with a rubric, a server that dies mid-episode,
and `agentgym eval` with the oracle policy."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="needs the mcp SDK: pip install 'agentgym[mcp]'")

import agentgym  # noqa: E402
from agentgym.cli import main  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402

SERVER = str(Path(__file__).parents[1] / "tools" / "mcp_servers" / "demo_server.py")
TASKS = [
    {"id": "peru", "question": "What is the capital of Peru?", "answer": "Lima",
     "oracle": [{"tool": "capital", "arguments": {"country": "Peru"}}, "<answer>Lima</answer>"]},
    {"id": "sum", "question": "What is 20 + 22?", "answer": "42", "checker": "number"},
    {"id": "doom", "question": "Call the die tool.", "answer": "never"},
]


def call(name, **arguments):
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


@pytest.fixture(scope="module")
def env():
    env = agentgym.make("agentgym/MCP-v0", server=[sys.executable, SERVER], tasks=TASKS, call_timeout_s=5)
    yield env
    env.close()


def play(env, actions):
    steps = []
    for action in actions:
        steps.append(env.step(action))
        if steps[-1][2] or steps[-1][3]:
            break
    return steps


def test_tools_come_from_the_server_plus_an_answer_tool(env):
    assert [t.name for t in env.tools] == ["add", "capital", "fail", "hang", "die", "pid", "answer"]
    assert "<tool_call>" in env.unwrapped.instructions


def test_oracle_episode_solves_the_task_through_a_real_tool_call(env):
    obs, info = env.reset(seed=0)
    assert obs == "What is the capital of Peru?" and info["task_id"] == "peru" and info["reference"] == "Lima"
    steps = []
    while not steps or not (steps[-1][2] or steps[-1][3]):
        steps.append(env.step(env.unwrapped.oracle_action()))
    (obs1, r1, *_), (obs2, r2, term, trunc, info2) = steps
    assert obs1 == "<tool_response>\nLima\n</tool_response>" and r1 == 0.0
    assert r2 == 1.0 and term and info2["success"] and info2["reward_components"] == {"outcome": 1.0}


def test_checkers_grade_answers(env):
    env.reset(seed=1)
    assert env.step(call("add", a=20, b=22))[0] == "<tool_response>\n42\n</tool_response>"
    _, reward, term, _, info = env.step(call("answer", text="It is 42.0"))
    assert term and info["success"] and reward == 1.0  # the number checker reads 42.0 as 42
    env.reset(seed=0)
    _, reward, term, _, info = env.step("<answer>Cusco</answer>")
    assert term and not info["success"] and reward == 0.0 and info["reward_components"] == {"outcome": 0.0}
    env.reset(seed=0)
    assert env.step("<answer>the LIMA.</answer>")[4]["success"]  # normalized: case, articles, punctuation


def test_bad_actions_are_invalid_observations_not_crashes(env):
    env.reset(seed=0)
    for action in ["", "hello", "<tool_call>{oops</tool_call>", call("capital"), call("capital", country=3),
                   call("fail", message="nope"), "x" * 100_000]:
        obs, reward, term, trunc, info = env.step(action)
        assert not info["valid_action"] and not term and reward == 0.0 and obs


def test_a_server_that_dies_mid_episode_ends_it_and_the_next_reset_restarts_it(env):
    env.reset(seed=2)
    old_pid = int(env.step(call("pid"))[0].split("\n")[1])
    obs, reward, term, trunc, info = env.step(call("die"))
    assert term and not info["success"] and reward == 0.0
    assert "the MCP server died" in info["error"] and "episode is over" in obs
    obs, info = env.reset(seed=0)
    new_pid = int(env.step(call("pid"))[0].split("\n")[1])
    assert new_pid != old_pid and not pid_alive(old_pid)
    assert env.step("<answer>Lima</answer>")[4]["success"]


def test_splits_and_task_ids(tmp_path):
    tasks = [{"id": "a", "question": "q a", "answer": "1", "split": "train"},
             {"id": "b", "question": "q b", "answer": "2", "split": "test"},
             {"id": "c", "question": "q c", "answer": "3", "split": "test"}]
    env = agentgym.make("agentgym/MCP-v0", server=[sys.executable, SERVER], tasks=tasks)
    try:
        assert {env.reset(seed=s, options={"split": "test"})[1]["task_id"] for s in range(4)} == {"b", "c"}
        assert env.reset(seed=7, options={"split": "train"})[1]["task_id"] == "a"
        assert env.reset(seed=3, options={"task_id": "c"})[0] == "q c"
        assert env.reset(seed=3)[1]["task_id"] == env.reset(seed=3)[1]["task_id"]  # the seed fixes the task
        with pytest.raises(ConfigError, match="splits test, train"):
            env.reset(seed=0, options={"split": "dev"})
    finally:
        env.close()


def test_yaml_config_with_task_file_rubric_and_http_server(tmp_path):
    port = __import__("socket").socket()
    port.bind(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "k", "question": "Capital of Kenya?", "answer": "Nairobi"})
                                          + "\n")
    (tmp_path / "server.py").write_text(Path(SERVER).read_text())
    (tmp_path / "env.yaml").write_text(f"""
server:
  command: ["{{python}}", server.py, --http, --port, "{number}"]   # relative to this file
  url: http://127.0.0.1:{number}/mcp
tasks: tasks.jsonl
correct_reward: 2.0
include_tools: [capital]
rubric:
  - {{name: exact, fn: exact_answer, weight: 0.5}}
  - {{name: turns, fn: num_turns, weight: -0.1}}
  - {{name: broken, fn: "json:loads"}}
""")
    env = agentgym.make("agentgym/MCP-v0", config=str(tmp_path / "env.yaml"))
    try:
        assert [t.name for t in env.tools] == ["capital", "answer"]
        env.reset(seed=0)
        assert env.step(call("capital", country="Kenya"))[0] == "<tool_response>\nNairobi\n</tool_response>"
        _, reward, term, _, info = env.step("<answer>Nairobi</answer>")
        assert info["reward_components"] == pytest.approx({"outcome": 2.0, "exact": 0.5, "turns": -0.2})
        assert reward == pytest.approx(2.3) and info["rubric_scores"] == {"exact": 1.0, "turns": 2.0}
        assert "TypeError" in info["rubric_errors"]["broken"]  # recorded, scores nothing, no crash
    finally:
        env.close()


@pytest.mark.parametrize("kwargs,needle", [
    ({"server": "x"}, "needs `server`"),
    ({"server": [sys.executable, SERVER], "tasks": []}, "non-empty list"),
    ({"server": [sys.executable, SERVER], "tasks": [{"question": "q"}]}, "give a reference `answer`"),
    ({"server": [sys.executable, SERVER], "tasks": [{"question": "q", "answer": "a", "checker": "fuzzy"}]},
     "unknown checker 'fuzzy'"),
    ({"server": [sys.executable, SERVER], "tasks": [{"question": "q", "answr": "a"}]}, "unknown key"),
    ({"server": [sys.executable, SERVER], "tasks": "/nonexistent/tasks.yaml"}, "does not exist"),
    ({"config": "/nonexistent/env.yaml"}, "does not exist"),
    ({"server": [sys.executable, SERVER], "tasks": TASKS, "rubric": [{"name": "x", "fn": "nope"}]},
     "unknown reward function"),
])
def test_bad_config_is_one_clear_error(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        agentgym.make("agentgym/MCP-v0", **kwargs)


def test_default_demo_env_and_agentgym_eval_with_the_oracle(tmp_path, capsys):
    out = tmp_path / "eval"
    start = time.perf_counter()
    code = main(["eval", "--policy", "oracle", "--env", "agentgym/MCP-v0", "--episodes", "3", "--out", str(out),
                 "--workers", "2", "--no-progress"])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    assert "| agentgym/MCP-v0 | 3 | 100.0%" in stdout
    results = json.loads((out / "results.json").read_text())
    trajectories = [t["trajectory"] for t in results["trajectories"]]
    assert len(trajectories) == 3 and all(t["success"] for t in trajectories)
    # the test split's tasks, solved through real tool calls to the facts server
    assert {t["task_id"] for t in trajectories} == {"capital-egypt", "capital-canada", "pop-sum-kenya-peru"}
    assert max(len(t["turns"]) for t in trajectories) == 4
    assert time.perf_counter() - start < 120


def test_docs_mcp_snippet_runs_as_written():
    import re
    import subprocess

    root = Path(__file__).parents[2]
    section = (root / "docs" / "guide" / "mcp.md").read_text()  # the README's MCP section moved to the docs
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 30
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["<tool_response>", "Lima", "</tool_response>", "reward 1.0"]
