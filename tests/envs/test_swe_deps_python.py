"""A test-requirements folder belongs to one Python (issue 51, defect 8): its cache key and manifest name the
Python pip installed for, so another host Python builds its own folder, and a sandbox whose python3 differs from
the folder's is refused with the fix instead of failing every test run as an import error."""
import json
import os
import subprocess

import pytest

from agentgym.envs.swe import deps as deps_mod
from agentgym.envs.swe.deps import (SANDBOX_PYTHON, DepsFolder, Requirements, check_sandbox_python, deps_key,
                                    install_requirements, load_deps_folder, python_version)
from agentgym.errors import ConfigError
from agentgym.tools.sandbox import backend_problem

REQS = Requirements(("no-such-package-agentgym==9.9",), ("requirements-test.txt",))


def test_the_cache_key_names_the_python(monkeypatch):
    here = deps_key("shapes", REQS)
    assert f"cpython{python_version()}" in here
    monkeypatch.setattr(deps_mod, "python_version", lambda: "3.99")
    other = deps_key("shapes", REQS)
    assert other != here and "cpython3.99" in other


def test_another_python_does_not_reuse_the_folder(tmp_path, monkeypatch):
    first = install_requirements(REQS, "shapes", root=str(tmp_path), pip_args=("--no-index",))
    assert first is not None and first.python == python_version()
    manifest = json.loads(open(os.path.join(first.path, deps_mod.MANIFEST)).read())
    assert manifest["python"] == python_version() and load_deps_folder(first.path) == first
    monkeypatch.setattr(deps_mod, "python_version", lambda: "3.99")
    second = install_requirements(REQS, "shapes", root=str(tmp_path), pip_args=("--no-index",))
    assert second is not None and second.path != first.path and second.python == "3.99"
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(first.path), os.path.basename(second.path)])


def test_the_sandbox_probe_prints_the_version_as_the_host_names_it():
    out = subprocess.run(["bash", "-c", SANDBOX_PYTHON], capture_output=True, text=True, check=True).stdout
    assert out.strip() == python_version()


def test_a_sandbox_on_another_python_is_refused_in_one_line():
    folder = DepsFolder("/cache/deps/shapes-x", ("tinydep",), (), (), "3.11")
    check_sandbox_python(folder, "3.11\n")                       # the same: fine
    check_sandbox_python(DepsFolder("/old", (), (), ()), "3.12")  # a folder from before versions were kept: unknown
    with pytest.raises(ConfigError, match=r"installed for Python 3\.11, but the sandbox runs Python 3\.12") as exc:
        check_sandbox_python(folder, "3.12\n")
    assert "\n" not in str(exc.value) and "make-tasks" in str(exc.value)


def test_the_swe_env_refuses_a_folder_built_for_another_python(tmp_path):
    if backend_problem("bwrap"):
        pytest.skip(f"bwrap sandbox unavailable: {backend_problem('bwrap')}")
    import agentgym
    from agentgym.envs.swe.sources import MINI_DIR

    folder = tmp_path / "deps"
    folder.mkdir()
    (folder / deps_mod.MANIFEST).write_text(json.dumps({"installed": [], "unsatisfied": [], "plugins": [],
                                                        "python": "3.1"}))
    repo = os.path.join(MINI_DIR, "intervals")
    row = {"instance_id": "x-1", "repo": "intervals", "base_dir": repo, "patch": "(never applied)",
           "FAIL_TO_PASS": ["t::a"], "deps_dir": str(folder)}  # the check comes before any patch
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    env = agentgym.make("agentgym/SWE-Mini-v0", tasks=str(tmp_path / "tasks.jsonl"), backend="bwrap")
    try:
        with pytest.raises(ConfigError, match=r"installed for Python 3\.1, but the sandbox runs Python 3\."):
            env.reset(seed=0)
    finally:
        env.close()
