"""The SWE oracle edits like an engineer (small str_replace calls within the default eval's action limit), the
first observation is bounded on any repository, and the oracle solves episodes under the default eval limits."""
from __future__ import annotations

import json
import os

import pytest

from agentgym.envs.swe.env import FIRST_OBSERVATION_CHARS, first_observation
from agentgym.envs.swe.oracle import MAX_ACTION_BYTES, apply_call, call_text, next_edit, plan_edits
from agentgym.envs.swe.sources import MINI_TASKS
from agentgym.envs.swe.summary import summarize_files
from agentgym.envs.swe.tasks import SWETask, apply_diff, diff_paths, load_tasks, read_tree
from agentgym.eval.records import EvalConfig
from agentgym.tools.sandbox import backend_problem

BODY = "".join(f"    value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, 30))


def solve_offline(path: str, buggy: str, fixed: str) -> list[dict]:
    plan = plan_edits(path, buggy, fixed, max_turns=50)
    assert plan is not None
    text = buggy
    for call in plan:
        assert len(call_text(call).encode()) <= MAX_ACTION_BYTES, call_text(call)
        assert call["name"] == "str_replace"
        text = apply_call(text, call)
    assert text == fixed
    return plan


def test_the_action_limit_is_the_default_evals():
    assert MAX_ACTION_BYTES == EvalConfig.__dataclass_fields__["max_tokens"].default


def test_one_operator_is_one_small_line_edit():
    fixed = "def f(a, b):\n    x = 1\n    return a + b\n"
    (call,) = solve_offline("m.py", fixed.replace("a + b", "a - b"), fixed)
    assert call["arguments"] == {"path": "m.py", "old_str": "return a - b", "new_str": "return a + b"}


def test_a_repeated_line_is_named_by_its_line_number():
    once = "def f(x):\n    return x - 1\n\n\ndef g(x):\n    return x * 2\n"
    (call,) = solve_offline("m.py", once, once.replace("x - 1", "x + 1"))
    assert call["arguments"]["old_str"] == "return x - 1" and "line" not in call["arguments"]
    twice = "def f(x):\n    return x - 1\n\n\ndef g(x):\n    return x - 1\n"
    target = "def f(x):\n    return x - 1\n\n\ndef g(x):\n    return x + 1\n"
    (call,) = solve_offline("m.py", twice, target)
    assert call["arguments"]["line"] == 6 and call["arguments"]["old_str"] == "return x - 1"


def test_a_removed_block_goes_back_in_chunks_within_the_limit():
    fixed = f"def f():\n    value_0 = 0\n{BODY}    return value_29\n"
    buggy = "def f():\n    value_0 = 0\n    return value_29\n"
    plan = solve_offline("pkg/mod.py", buggy, fixed)
    assert len(plan) > 1  # ~1.1 kB of code cannot go in one 256-byte action


def test_a_long_line_is_narrowed_to_the_changed_words():
    names = ", ".join(f"argument_number_{i}" for i in range(12))
    fixed = f"result = call({names}, flag=True)\n"
    (call,) = solve_offline("m.py", fixed.replace("flag=True", "flag=False"), fixed)
    assert call["arguments"]["old_str"] == "flag=False)" and "line" not in call["arguments"]  # unique: no line


def test_a_fix_that_cannot_fit_is_refused_not_cut():
    fixed = "x = '" + "a" * 400 + "'\n"
    assert next_edit("m.py", "x = 'b'\n", fixed) is None
    assert plan_edits("m.py", "x = 'b'\n", fixed) is None


def test_every_shipped_task_has_a_small_oracle_plan():
    for task in load_tasks(MINI_TASKS):
        base = read_tree(task.base_dir, diff_paths(task.bug_patch))
        for path, buggy in apply_diff(base, task.bug_patch).items():
            assert buggy is not None
            assert 1 <= len(solve_offline(path, buggy, base[path])) <= 3, task.instance_id


# ----------------------------------------------------------------------------------------------- first observation

def generated_repository(root) -> list[str]:
    """Thousands of files as a big project has them: packages, tests, docs, locale catalogues, CI, vendored code."""
    paths = [f"src/bigpkg/sub{i % 40}/mod{i}.py" for i in range(1600)]
    paths += [f"tests/unit/test_mod{i}.py" for i in range(900)]
    paths += [f"docs/api/page{i}.rst" for i in range(700)]
    paths += [f"src/bigpkg/locale/{lang}/LC_MESSAGES/bigpkg.{ext}" for lang in range(150) for ext in ("po", "mo")]
    paths += [f".github/workflows/job{i}.yml" for i in range(12)]
    paths += [f"src/bigpkg/_vendor/lib{i}.py" for i in range(200)]
    paths += ["README.md", "pyproject.toml", "tox.ini", "setup.cfg"]
    for path in paths:
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as fh:
            fh.write("x = 1\n" if path.endswith(".py") else "text\n")
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_first_observation_of_thousands_of_files_is_bounded(tmp_path):
    files = generated_repository(tmp_path)
    assert len(files) > 3500
    failing = [f"tests/unit/test_mod{i}.py::test_case_{i}" for i in range(8)]
    issue = "\n".join(["Some of bigpkg's tests fail:", *(f"  - {t}" for t in failing[:6]), "  - ... and 2 more",
                       "", "The failures report:", *(f"    assert {i} == {i + 1}" for i in range(12))])
    task = SWETask("bigpkg-1", "bigpkg", str(tmp_path), issue, "patch", tuple(failing))
    obs = first_observation(task, files, FIRST_OBSERVATION_CHARS)
    assert len(obs) <= FIRST_OBSERVATION_CHARS
    assert all(t in obs for t in failing[:6]) and "assert 11 == 12" in obs   # the failing tests and messages kept
    assert "README.md" in obs and "pyproject.toml" in obs and "src/bigpkg" in obs
    assert "locale data: 300 files" in obs and "CI config: 12 files" in obs and "vendored: 200 files" in obs
    assert ".po" not in obs.replace("locale data", "")  # no catalogue is listed one by one
    assert "find . -name" in obs  # the agent is told how to list more


@pytest.mark.parametrize("budget", [400, 1500, 6000])
def test_summary_stays_within_any_budget(budget):
    files = [f"a{i % 7}/b{i % 13}/c{i % 5}/f{i}.py" for i in range(4000)] + [f"data/x{i}.csv" for i in range(3000)]
    text = summarize_files(files, budget=budget)
    assert len(text) <= budget and text.startswith("7000 files (4000 Python)")


def test_small_repository_is_listed_whole():
    files = ["pkg/__init__.py", "pkg/core.py", "tests/test_core.py", "README.md", "pyproject.toml"]
    text = summarize_files(files)
    assert "pkg/ __init__.py core.py" in text and "tests/ test_core.py" in text and "more folders" not in text


# ----------------------------------------------------------------------------------------------- default eval limits

@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_oracle_solves_under_the_default_eval_limits(tmp_path, backend):
    """`agentgym eval --policy oracle` with every limit at its default (256 tokens a turn, 8,192 context)."""
    problem = backend_problem(backend)
    if problem:
        pytest.skip(f"{backend} sandbox unavailable: {problem}")
    from agentgym.eval.runner import run_eval
    from agentgym.registration import SuiteEntry

    entry = SuiteEntry("agentgym/SWE-Mini-v0", kwargs={"backend": backend})
    run = run_eval(EvalConfig(policy="oracle", entries=(entry,), out_dir=str(tmp_path / "eval"), episodes=3,
                              workers=1), progress=False)
    assert len(run.records) == 3
    for record in run.records:
        traj = record.trajectory
        assert traj.success and traj.end_reason != "context_full", (traj.end_reason, traj.error)
        assert all(len(t.action.encode()) <= MAX_ACTION_BYTES for t in traj.turns)
        assert json.loads(traj.turns[-1].action.split(">", 1)[1].rsplit("<", 1)[0])["name"] == "submit"
