"""Test environments with their dependencies: a repository whose suite imports a test-only package (and uses a
fixture from its pytest plugin) gets tasks once the requirement is installed from a package index — here a local
wheelhouse (`--no-index --find-links`), so no network — and the oracle solves them in both sandboxes."""
from __future__ import annotations

import json
import os
import zipfile

import pytest

import agentgym
from agentgym.envs.swe.deps import DepsFolder, install_requirements, read_test_requirements
from agentgym.envs.swe.synth import synthesize
from agentgym.envs.swe.tasks import load_tasks, save_tasks
from agentgym.errors import ConfigError
from agentgym.tools.sandbox import backend_problem

LIB = '''def scale(values, factor):
    """Every value times factor, rounded to two places."""
    return [round(v * factor, 2) for v in values]


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value
'''
TESTS = '''import tinydep
from shapes.core import clamp, scale


def test_scale(tiny_factor):
    assert scale([1, 2], tiny_factor) == [3, 6]
    assert tinydep.double(scale([0.5], 2)[0]) == 2


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5
'''


def wheel(wheelhouse) -> None:
    """A real wheel of `tinydep` (a module and a pytest plugin registered under pytest11), built by hand."""
    files = {"tinydep/__init__.py": "def double(x):\n    return 2 * x\n",
             "tinydep/plugin.py": "import pytest\n\n\n@pytest.fixture\ndef tiny_factor():\n    return 3\n",
             "tinydep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
             "tinydep-1.0.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n"),
             "tinydep-1.0.dist-info/entry_points.txt": "[pytest11]\ntinydep = tinydep.plugin\n"}
    record = "".join(f"{name},,\n" for name in files) + "tinydep-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheelhouse / "tinydep-1.0-py3-none-any.whl", "w") as zf:
        for name, text in {**files, "tinydep-1.0.dist-info/RECORD": record}.items():
            zf.writestr(name, text)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("deps")
    repo = root / "shapes"
    (repo / "shapes").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "shapes" / "__init__.py").write_text("")
    (repo / "shapes" / "core.py").write_text(LIB)
    (repo / "tests" / "test_core.py").write_text(TESTS)
    (repo / "pyproject.toml").write_text('[project]\nname = "shapes"\nversion = "1"\n\n'
                                         '[project.optional-dependencies]\n'
                                         'tests = ["tinydep>=1", "pytest-cov", "coverage"]\nplot = ["matplotlib"]\n')
    (repo / "requirements-test.txt").write_text("-r requirements-extra.txt\n--index-url https://example.invalid\n")
    (repo / "requirements-extra.txt").write_text("tinydep  # again: kept once\nno-such-package-agentgym==9.9\n")
    wheelhouse = root / "wheels"
    wheelhouse.mkdir()
    wheel(wheelhouse)
    return repo, wheelhouse, root / "deps-cache"


def test_requirements_are_read_from_pyproject_and_requirement_files(shapes):
    repo, _, _ = shapes
    reqs = read_test_requirements(str(repo))
    assert reqs.names == ("tinydep>=1", "tinydep", "no-such-package-agentgym==9.9")  # no coverage tools, no plot extra
    assert reqs.sources == ("pyproject.toml", "requirements-test.txt")


def test_install_says_what_it_could_not_satisfy_and_caches(shapes):
    repo, wheelhouse, cache = shapes
    reqs = read_test_requirements(str(repo))
    deps = install_requirements(reqs, "shapes", root=str(cache),
                                pip_args=("--no-index", "--find-links", str(wheelhouse)))
    assert isinstance(deps, DepsFolder)
    assert "tinydep>=1" in deps.installed and deps.plugins == ("tinydep.plugin",)
    assert len(deps.unsatisfied) == 1 and deps.unsatisfied[0].startswith("no-such-package-agentgym==9.9 (")
    assert os.path.isfile(os.path.join(deps.path, "tinydep", "__init__.py"))
    again = install_requirements(reqs, "shapes", root=str(cache), pip_args=("--no-index",))  # cached: pip not run
    assert again == deps
    assert not [p for p in os.listdir(cache) if p.endswith(".part")]


def _deps(shapes) -> DepsFolder:
    repo, wheelhouse, cache = shapes
    deps = install_requirements(read_test_requirements(str(repo)), "shapes", root=str(cache),
                                pip_args=("--no-index", "--find-links", str(wheelhouse)))
    assert deps is not None
    return deps


def test_without_the_requirement_the_suite_cannot_start(shapes):
    if backend_problem("bwrap"):
        pytest.skip(f"bwrap sandbox unavailable: {backend_problem('bwrap')}")
    repo, _, _ = shapes
    with pytest.raises(ConfigError, match="module 'tinydep' is missing") as exc:
        synthesize(str(repo), backend="bwrap", max_tasks=1)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_tasks_need_no_deleted_test_and_the_oracle_solves_them(shapes, backend, tmp_path):
    problem = backend_problem(backend)
    if problem:
        pytest.skip(f"{backend} sandbox unavailable: {problem}")
    repo, _, _ = shapes
    deps = _deps(shapes)
    report = synthesize(str(repo), backend=backend, max_tasks=3, deps=deps)
    assert report.baseline_passed == 4 and report.tasks  # every test ran, test_scale (plugin fixture) included
    assert all(t.deps_dir == deps.path for t in report.tasks)
    path = tmp_path / "tasks.jsonl"
    save_tasks(report.tasks, str(path))
    assert json.loads(path.read_text().splitlines()[0])["deps_dir"]  # stored (relative) and read back
    assert load_tasks(str(path))[0].deps_dir == deps.path
    env = agentgym.make("agentgym/SWE-Mini-v0", tasks=str(path), backend=backend)
    try:
        for task in report.tasks:
            env.reset(seed=0, options={"task_id": task.instance_id})
            out = env.step('<tool_call>{"name": "bash", "arguments": {"command": '
                           '"python3 -c \\"import tinydep; print(tinydep.double(21))\\""}}</tool_call>')
            assert "\n42\n" in out[0], out[0]  # the agent's shell sees the requirements too
            for _ in range(4):
                obs, reward, terminated, _, info = env.step(env.unwrapped.oracle_action())
                assert info["valid_action"], obs
                if terminated:
                    break
            assert info["success"], task.instance_id
    finally:
        env.close()


def test_a_missing_requirements_folder_is_a_config_error(shapes, tmp_path):
    repo, _, _ = shapes
    if backend_problem("bwrap"):
        pytest.skip("bwrap sandbox unavailable")
    row = {"instance_id": "x-1", "repo": "shapes", "base_dir": str(repo), "patch": "p", "FAIL_TO_PASS": ["t::a"],
           "deps_dir": str(tmp_path / "gone")}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ConfigError, match="requirements folder .* is missing"):
        agentgym.make("agentgym/SWE-Mini-v0", tasks=str(tmp_path / "tasks.jsonl"), backend="bwrap")


def test_addopts_with_cov_options_need_pytest_cov(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.pytest.ini_options]\n'
                                             'addopts = "--cov=p --cov-report=term-missing"\n')
    reqs = read_test_requirements(str(tmp_path))
    assert reqs.names == ("pytest-cov",) and reqs.sources == ("pytest addopts (--cov)",)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\noptional-dependencies.test = ["pytest-cov"]\n')
    assert read_test_requirements(str(tmp_path)).names == ()  # not needed: coverage tools stay out


def test_library_tasks_carry_their_repositorys_split(tmp_path, monkeypatch):
    """The corpus holds whole repositories out: a held-out library's tasks are all `test`, read back from the cache
    as such, and `reset(options={"split": "test"})` draws only from them."""
    if backend_problem("bwrap"):
        pytest.skip(f"bwrap sandbox unavailable: {backend_problem('bwrap')}")
    import shutil

    from agentgym.envs.swe import sources

    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    copies = {}
    for name in ("intervals", "textkit"):
        copies[name] = str(tmp_path / name)
        shutil.copytree(os.path.join(sources.MINI_DIR, name), copies[name])
    monkeypatch.setattr(sources, "download_sdist", lambda name, version: copies[name])
    held = sources.library_tasks("intervals", "0", "bwrap", max_tasks=2, split="test")
    kept = sources.library_tasks("textkit", "0", "bwrap", max_tasks=2, split="train")
    assert {t.split for t in held} == {"test"} and {t.split for t in kept} == {"train"}
    assert [t.split for t in sources.library_tasks("intervals", "0", "bwrap", max_tasks=2, split="test")] == \
        ["test", "test"]  # from the cache
    path = tmp_path / "mixed.jsonl"
    save_tasks([*held, *kept], str(path))
    env = agentgym.make("agentgym/SWE-Mini-v0", tasks=str(path), backend="bwrap")
    try:
        drawn = {env.reset(seed=s, options={"split": "test"})[1]["task_id"] for s in range(6)}
    finally:
        env.close()
    assert drawn <= {t.instance_id for t in held}
