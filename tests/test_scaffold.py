"""`agentgym new env NAME` writes an installable env package that passes its own test; bad input writes nothing."""
import json
import os
import shlex
import subprocess
import sys

import pytest

from agentgym.scaffold import ScaffoldError, check_written, env_fields, new_env


def _agentgym(*args, cwd):
    return subprocess.run([sys.executable, "-m", "agentgym", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_writes_the_package_files(tmp_path):
    target = new_env("word_task", tmp_path)
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "src/word_task/__init__.py", "src/word_task/env.py",
                     "tests/test_env.py"]
    assert os.listdir(tmp_path) == ["word_task"]   # the staging folder is gone
    assert env_fields("word_task")["env_id"] == "word_task/WordTask-v0"
    pyproject = (target / "pyproject.toml").read_text()
    assert '[project.entry-points."agentgym.envs"]\nword_task = "word_task:register"' in pyproject
    for path in target.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")


def test_the_written_env_passes_check_env(tmp_path):
    target = new_env("word_task", tmp_path)
    assert {"determinism", "any string", "oracle", "close"} <= set(check_written(target, "word_task"))


def test_an_env_broken_after_writing_fails_the_check_in_one_line(tmp_path):
    target = new_env("word_task", tmp_path)
    env_py = target / "src" / "word_task" / "env.py"
    env_py.write_text(env_py.read_text().replace("if not guess.isalpha():", "if not guess.isalpha():\n            raise ValueError('no letters\\nin ' + repr(guess))"))
    with pytest.raises(ScaffoldError, match=r"fails check_env: CheckError: \[gymnasium\] .*ValueError: no letters$") as err:
        check_written(target, "word_task")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name, reason", [
    ("My-Task", "not a valid package name"), ("9lives", "not a valid package name"),
    ("class", "not a valid package name"), ("", "not a valid package name"),
    ("json", "already importable"),
])
def test_refuses_an_invalid_name_and_writes_nothing(tmp_path, name, reason):
    with pytest.raises(ScaffoldError, match=reason):
        new_env(name, tmp_path)
    assert os.listdir(tmp_path) == []


def test_refuses_an_existing_folder_and_keeps_it(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "mine.txt").write_text("keep me")
    out = _agentgym("new", "env", "demo", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "already exists" in out.stderr
    assert sorted(os.listdir(tmp_path)) == ["demo"] and os.listdir(tmp_path / "demo") == ["mine.txt"]


def test_a_folder_it_cannot_write_in_is_one_line(tmp_path):
    out = _agentgym("new", "env", "zz_unwritable", "--dir", "/sys", cwd=tmp_path)   # not writable, even for root
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "cannot write in /sys" in out.stderr and "Traceback" not in out.stderr


def test_cli_refuses_a_bad_name_in_one_line(tmp_path):
    out = _agentgym("new", "env", "bad-name", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "lowercase Python identifier" in out.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_new_env_installs_and_passes_its_own_test(tmp_path):
    # a throwaway venv that sees the system's packages (agentgym, pytest): the suite's environment stays clean
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    out = _agentgym("new", "env", "demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "pip install -e demo && pytest demo" in out.stdout and "check_env passed: api" in out.stdout
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              "--no-build-isolation", "-e", "demo"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    test = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert test.returncode == 0, test.stdout[-3000:]
    assert "3 passed" in test.stdout
    # installed, the env is one the command line finds by id: listed, and evaluated as its README says
    listed = subprocess.run([python, "-m", "agentgym", "list", "demo/"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert "demo/Demo-v0" in listed.stdout, listed.stderr
    evaluated = subprocess.run([python, "-m", "agentgym", "eval", "--policy", "oracle", "--env", "demo/Demo-v0",
                                "--episodes", "3", "--out", "ev", "--no-progress"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert "demo/Demo-v0" in json.dumps(results) and "100.0%" in evaluated.stdout


def test_the_written_readmes_commands_parse(tmp_path):
    from agentgym.cli import build_parser

    target = new_env("demo_task", tmp_path)
    lines = [line for line in (target / "README.md").read_text().splitlines() if line.startswith("agentgym ")]
    assert {shlex.split(line)[1] for line in lines} >= {"check", "play", "eval", "train"}
    for line in lines:
        build_parser().parse_args(shlex.split(line.split("  #", 1)[0])[1:])
