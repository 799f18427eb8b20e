"""Task sources: diffs, AST mutations, the synthesiser and its CLI, SWE-bench instances from a real git repo."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.envs.swe.mutate import KINDS, find_mutations, interleave_by_kind
from agentgym.envs.swe.sources import MINI_DIR, MINI_TASKS
from agentgym.envs.swe.tasks import PatchError, SWETask, apply_diff, load_tasks, make_diff, save_tasks
from agentgym.errors import ConfigError
from agentgym.tools.sandbox import backend_problem

lines = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e"
                                       "\x85\u2028\u2029"), max_size=8), max_size=12)


@given(lines, lines, st.booleans())
def test_diff_round_trip(old, new, trailing_newline):
    a = "\n".join(old) + ("\n" if trailing_newline and old else "")
    b = "\n".join(new) + ("\n" if new else "")
    diff = make_diff("pkg/m.py", a, b)
    if a == b:
        assert diff == ""
    else:
        assert apply_diff({"pkg/m.py": a}, diff) == {"pkg/m.py": b}
        assert apply_diff({"pkg/m.py": b}, make_diff("pkg/m.py", b, a)) == {"pkg/m.py": a}


def test_diff_new_deleted_and_mismatch():
    diff = make_diff("new.py", None, "x = 1\n") + make_diff("old.py", "y = 2\n", None)
    assert apply_diff({"old.py": "y = 2\n"}, diff) == {"new.py": "x = 1\n", "old.py": None}
    with pytest.raises(PatchError):
        apply_diff({"m.py": "a\nb\nc\n"}, make_diff("m.py", "a\nB\nc\n", "a\nX\nc\n"))


def test_mutations_are_valid_python_and_cover_the_kinds():
    found = []
    for repo in ("textkit", "intervals"):
        for dirpath, _, files in os.walk(os.path.join(MINI_DIR, repo, repo)):
            for name in files:
                path = os.path.join(dirpath, name)
                source = open(path).read()
                for m in find_mutations(name, source):
                    mutated = m.apply(source)
                    assert mutated != source
                    ast.parse(mutated)  # every mutation keeps the file parseable
                    found.append(m)
    kinds = {m.kind for m in found}
    assert {"operator", "comparison", "off_by_one", "swap_args", "remove_branch", "remove_return",
            "wrong_variable", "boolean"} <= kinds <= set(KINDS)
    order = interleave_by_kind(found, seed=1)
    assert sorted(map(id, order)) == sorted(map(id, found))
    assert len({m.kind for m in order[:len(kinds)]}) == len(kinds)  # kinds are taken in turn


def test_mutation_spans_keep_comments_and_formatting():
    source = "def f(a, b):\n    # keep me\n    return a + b  # and me\n"
    (op,) = [m for m in find_mutations("m.py", source) if m.kind == "operator"]
    assert op.apply(source) == "def f(a, b):\n    # keep me\n    return a - b  # and me\n"


def test_shipped_mini_tasks_are_well_formed():
    tasks = load_tasks(MINI_TASKS)
    assert len(tasks) >= 10 and {t.repo for t in tasks} == {"textkit", "intervals"}
    for task in tasks:
        assert os.path.isdir(task.base_dir) and task.fail_to_pass and task.pass_to_pass
        assert not set(task.fail_to_pass) & set(task.pass_to_pass)
        assert task.source.startswith("synth:") and "Do not change the tests" in task.problem_statement


@pytest.fixture(scope="module")
def sandbox_backend():
    for name in ("bwrap", "docker"):
        if backend_problem(name) is None:
            return name
    pytest.skip("no sandbox back end here: " + "; ".join(f"{n}: {backend_problem(n)}" for n in ("bwrap", "docker")))


def test_make_tasks_cli_on_a_copy_of_a_mini_repo(tmp_path, sandbox_backend):
    repo = tmp_path / "textkit"
    shutil.copytree(os.path.join(MINI_DIR, "textkit"), repo)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "agentgym", "swe", "make-tasks", str(repo), "--out", str(out),
                           "--max-tasks", "2", "--backend", sandbox_backend, "--seed", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    tasks = load_tasks(str(out / "tasks.jsonl"))
    assert len(tasks) == 2 and "2 tasks from" in done.stdout
    for task in tasks:
        source = open(repo / "textkit" / "core.py").read()
        buggy = apply_diff({"textkit/core.py": source}, task.bug_patch)["textkit/core.py"]
        assert buggy != source and apply_diff({"textkit/core.py": buggy}, task.patch)["textkit/core.py"] == source
        assert all(t.startswith("tests/test_core.py::") for t in task.fail_to_pass)
    bad = subprocess.run([sys.executable, "-m", "agentgym", "swe", "make-tasks", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "is not a directory" in bad.stderr and "Traceback" not in bad.stderr


def test_synthesiser_rejects_a_repo_whose_tests_do_not_pass(tmp_path, sandbox_backend):
    from agentgym.envs.swe.synth import synthesize

    (tmp_path / "lib.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "test_lib.py").write_text("from lib import add\n\ndef test_add():\n    assert add(1, 2) == 4\n")
    with pytest.raises(ConfigError, match="no test"):
        synthesize(str(tmp_path), backend=sandbox_backend)


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t"}).stdout


@pytest.fixture
def swebench_instance(tmp_path):
    """A real git history: a buggy commit, then a fix commit that also adds a regression test."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clones = tmp_path / "clones"
    repo = clones / "acme" / "intervals"
    shutil.copytree(os.path.join(MINI_DIR, "intervals"), repo)
    ops = repo / "intervals" / "ops.py"
    ops.write_text(ops.read_text().replace("start <= result[-1][1] + 1", "start <= result[-1][1]"))  # the bug
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "buggy")
    base = git(repo, "rev-parse", "HEAD").strip()
    ops.write_text(ops.read_text().replace("start <= result[-1][1]", "start <= result[-1][1] + 1"))
    with open(repo / "tests" / "test_ops.py", "a") as fh:
        fh.write("\n\ndef test_merge_adjacent_regression():\n    assert merge([(1, 1), (2, 2)]) == [(1, 2)]\n")
    git(repo, "commit", "-qam", "fix merging touching intervals")
    fix = git(repo, "rev-parse", "HEAD").strip()
    instance = {"instance_id": "acme__intervals-1", "repo": "acme/intervals", "base_commit": base,
                "patch": git(repo, "diff", base, fix, "--", "intervals"),
                "test_patch": git(repo, "diff", base, fix, "--", "tests"),
                "problem_statement": "merge() keeps touching intervals such as (1, 2) and (3, 4) apart.",
                "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_merge_touching",
                                            "tests/test_ops.py::test_merge_adjacent_regression"]),
                "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_merge_overlapping",
                                            "tests/test_ops.py::test_total_length"])}
    path = tmp_path / "instances.json"
    path.write_text(json.dumps([instance]))
    return path, clones


def test_swebench_instances_from_a_real_git_repo(swebench_instance, sandbox_backend, monkeypatch, tmp_path):
    import agentgym
    from agentgym.envs.swe.swebench import load_swebench

    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    path, clones = swebench_instance
    (task,) = load_swebench(str(path), str(clones))
    assert task.fail_to_pass[1].endswith("regression") and "test_ops.py" in task.test_patch
    with pytest.raises(ConfigError, match="repo_dir or image"):
        load_swebench(str(path))
    env = agentgym.make("agentgym/SWE-Mini-v0", backend=sandbox_backend, tasks=f"swebench:{path}@{clones}")
    try:
        obs, info = env.reset(seed=0)
        assert "touching intervals" in obs
        assert "regression" not in env.unwrapped.sandbox.read_file("tests/test_ops.py").decode()  # hidden test
        obs, reward, terminated, _, info = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
        assert terminated and not info["success"]
        env.reset(seed=0)
        obs, reward, terminated, _, info = env.step(env.unwrapped.oracle_action())
        assert info["reward_components"]["progress"] == pytest.approx(0.5)  # both FAIL_TO_PASS now pass
        obs, reward, terminated, _, info = env.step(env.unwrapped.oracle_action())
        assert terminated and info["success"] and reward == 1.0
    finally:
        env.close()


def test_task_file_errors_are_one_line_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="make-tasks"):
        load_tasks(str(tmp_path / "missing.jsonl"))
    (tmp_path / "bad.jsonl").write_text('{"instance_id": "x", "patch": "", "FAIL_TO_PASS": []}\n')
    with pytest.raises(ConfigError, match="lacks"):
        load_tasks(str(tmp_path / "bad.jsonl"))
    task = SWETask("a", "r", str(tmp_path), "p", "diff", ("t.py::x",))
    save_tasks([task], str(tmp_path / "ok.jsonl"))
    assert load_tasks(str(tmp_path / "ok.jsonl")) == [task]


@pytest.mark.docker
def test_a_task_whose_repository_lives_in_a_docker_image(tmp_path):
    """SWE-bench style: the repo is inside a (locally built) image at /testbed, not in a host folder."""
    import agentgym

    problem = backend_problem("docker")
    if problem:
        pytest.skip(f"docker sandbox unavailable: {problem}")
    from agentgym.tools.sandbox.docker import DEFAULT_IMAGE, client

    context = tmp_path / "ctx"
    shutil.copytree(os.path.join(MINI_DIR, "intervals"), context / "repo")
    ops = context / "repo" / "intervals" / "ops.py"
    fixed = ops.read_text()
    buggy = fixed.replace("if start > end:", "if start >= end:")
    ops.write_text(buggy)
    (context / "Dockerfile").write_text(f"FROM {DEFAULT_IMAGE}\nCOPY repo /testbed\n")
    tag = "agentgym/swe-test-intervals:1"
    client().images.build(path=str(context), tag=tag, rm=True)
    row = {"instance_id": "img-1", "repo": "intervals", "image": tag, "patch": make_diff("intervals/ops.py", buggy, fixed),
           "FAIL_TO_PASS": ["tests/test_ops.py::test_overlap_single_point"],
           "PASS_TO_PASS": ["tests/test_ops.py::test_overlap"], "problem_statement": "overlap((1, 3), (3, 4)) is None"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    env = agentgym.make("agentgym/SWE-Mini-v0", backend="docker", tasks=str(tmp_path / "tasks.jsonl"))
    try:
        env.reset(seed=0)
        assert env.unwrapped.sandbox.image == tag
        assert b"start >= end" in env.unwrapped.sandbox.read_file("intervals/ops.py")
        for _ in range(2):
            obs, reward, terminated, _, info = env.step(env.unwrapped.oracle_action())
        assert terminated and info["success"]
    finally:
        env.close()


def test_a_test_the_sandbox_skips_is_not_broken_but_a_failure_is():
    from agentgym.envs.swe.testing import TestRun, parse_statuses
    from agentgym.tools.sandbox import ExecResult

    out = ("=== short test summary info ===\nPASSED t.py::test_a\nFAILED t.py::test_b - assert 1 == 2\n"
           "SKIPPED [1] t.py:9: requires xgettext\n")
    run = TestRun(parse_statuses(out), out, ExecResult(1, out, 1.0))
    assert run.not_broken("t.py::test_a") and run.not_broken("t.py::test_c")  # test_c: skipped (folded)
    assert not run.not_broken("t.py::test_b") and not run.passed("t.py::test_c")
    broken = out + "ERROR collecting t.py\n"
    assert not TestRun(parse_statuses(broken), broken, ExecResult(2, broken, 1.0)).not_broken("t.py::test_c")
