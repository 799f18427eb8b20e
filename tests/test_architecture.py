"""The allowed import arrows between the top-level folders (see ARCHITECTURE.md), held for every module.

Every `import` and `from ... import` is read with `ast`, at any depth (inside functions too), and mapped to
the folder it names: the core (`agentgym/`) or a wing (`envs/`, `tools/`, `policies/`, `train/`, installed
as `agentgym.envs`, ...). Wings import the core; envs may import tools; train may import policies; the core
imports no wing. The core reaches wings only by name (env entry points, `agentgym.policy.POLICY_LOADER`,
the CLI's subcommand modules), never by an import statement.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WINGS = ("envs", "tools", "policies", "train")
ALLOWED = {"core": {"core"}, "envs": {"core", "envs", "tools"}, "tools": {"core", "tools"},
           "policies": {"core", "policies"}, "train": {"core", "train", "policies"}}
# (file, imported module) -> why this one arrow is allowed
EXCEPTIONS = {("agentgym/registration.py", "agentgym.envs"):
              "discovery: the built-in families' __init__ registers string entry points and loads no env"}


def folder_of(module: str) -> str | None:
    """The top-level folder an absolute module name lives in; None outside agentgym."""
    parts = module.split(".")
    if parts[0] != "agentgym":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else "core"


def module_name(path: Path) -> str:
    """The installed name of a source file: envs/toy/keydoor.py -> agentgym.envs.toy.keydoor."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts[1:] if rel.parts[0] == "agentgym" else rel.parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(["agentgym", *parts])


def imported_modules(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, at any depth; `from X import Y` gives X.Y
    too (Y may be a submodule), relative imports are resolved against `module`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*package, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
    return found


def violations(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    source_folder = folder_of(module_name(path))
    bad: dict[tuple[int, str], str] = {}  # one report per line and folder
    for line, target in imported_modules(path.read_text(encoding="utf-8"), module_name(path),
                                         path.name == "__init__.py"):
        target_folder = folder_of(target)
        if target_folder is None or target_folder in ALLOWED[source_folder]:
            continue
        if not any(rel == f and (target == m or target.startswith(m + ".")) for f, m in EXCEPTIONS):
            bad.setdefault((line, target_folder), f"{rel}:{line}: {source_folder} -> {target_folder} ({target})")
    return list(bad.values())


def source_files() -> list[Path]:
    return sorted(p for folder in ("agentgym", *WINGS) for p in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def test_every_import_follows_the_allowed_arrows():
    files = source_files()
    assert len(files) > 50 and any(p.match("envs/toy/keydoor.py") for p in files)
    bad = [v for path in files for v in violations(path)]
    assert not bad, "imports against the arrows in ARCHITECTURE.md:\n" + "\n".join(bad)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles_even_through_imports_inside_functions():
    """A loop broken only by an import inside a function (as eval's html/reports/runner once were) fails."""
    files = {module_name(p): p for p in source_files()}
    graph = {}
    for name, path in files.items():
        targets = set()
        for _, target in imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py"):
            while target and target not in files:  # `from pkg.mod import name` -> pkg.mod
                target = target.rpartition(".")[0]
            targets.add(target)
        graph[name] = targets - {name, ""}
    assert import_cycles(graph) == []
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def train_ties(root: Path) -> dict[tuple[str, str], str]:
    """The arrows between train/'s own files and folders (a folder is one node: `sft`, `collectors`, ...), each
    with the first import that draws it: (from, to) -> "path:line"."""
    def node(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if parts[:2] == ["agentgym", "train"] and len(parts) > 2 else None

    ties: dict[tuple[str, str], str] = {}
    for path in sorted((root / "train").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name = module_name(path)
        for line, target in imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py"):
            a, b = node(name), node(target)
            if a and b and a != b:
                ties.setdefault((a, b), f"{path.relative_to(root).as_posix()}:{line}")
    return ties


def test_no_two_way_tie_between_train_folders():
    """train/'s files and folders stand in floors: no loop of arrows between them, even one a module-level
    graph cannot see (config -> sft/config.py while sft/run.py -> config once made sft/ and the config one
    knot, though no module imported itself)."""
    ties = train_ties(ROOT)
    graph: dict[str, set[str]] = {}
    for a, b in ties:
        graph.setdefault(a, set()).add(b)
    loops = import_cycles(graph)
    assert not loops, "two-way ties in train/ (a section that config.py imports lives outside a folder whose " \
        "modules import the config or the trainer, as train/sft_section.py does): " + "; ".join(
        ", ".join(f"{a} -> {b} ({ties[a, b]})" for a in loop for b in loop if (a, b) in ties) for loop in loops)


def test_a_tie_between_train_folders_is_reported(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    (tmp_path / "train" / "sft").mkdir(parents=True)
    (tmp_path / "train" / "config.py").write_text("from agentgym.train.sft.config import SFTSection\n")
    (tmp_path / "train" / "sft" / "run.py").write_text("def f():\n    from agentgym.train.config import load_config\n")
    ties = train_ties(tmp_path)
    assert ties == {("config", "sft"): "train/config.py:1", ("sft", "config"): "train/sft/run.py:2"}
    assert import_cycles({a: {b} for a, b in ties}) == [["config", "sft"]]


@pytest.mark.parametrize("source, module, expected", [
    ("def f():\n    from agentgym.policies import load_policy\n", "agentgym.engine.rollout",
     ["agentgym.policies", "agentgym.policies.load_policy"]),
    ("import agentgym.envs.search.world as w\n", "agentgym.tools.retrieval.corpus", ["agentgym.envs.search.world"]),
    ("from agentgym import train\n", "agentgym.eval.runner", ["agentgym", "agentgym.train"]),
    ("from ..toy import keydoor\n", "agentgym.envs.search.env", ["agentgym.envs.toy", "agentgym.envs.toy.keydoor"]),
    ("from . import world\n", "agentgym.envs.search", ["agentgym.envs.search", "agentgym.envs.search.world"]),
])
def test_imports_are_found_at_any_depth_and_resolved(source, module, expected):
    is_package = module == "agentgym.envs.search"
    assert [m for _, m in imported_modules(source, module, is_package)] == expected


def test_a_forbidden_arrow_is_reported(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "x.py").write_text("def f():\n    from agentgym.envs.search.world import World\n")
    (tmp_path / "agentgym").mkdir()
    (tmp_path / "agentgym" / "registration.py").write_text("import agentgym.envs\nimport agentgym.train.cli\n")
    assert violations(tmp_path / "tools" / "x.py") == ["tools/x.py:2: tools -> envs (agentgym.envs.search.world)"]
    assert violations(tmp_path / "agentgym" / "registration.py") == [
        "agentgym/registration.py:2: core -> train (agentgym.train.cli)"]
    assert folder_of("agentgym.tools.retrieval") == "tools" and folder_of("agentgym.toolcalls") == "core"
    assert module_name(tmp_path / "tools" / "x.py") == "agentgym.tools.x"


def unnamed_modules(doc: str) -> list[str]:
    """Modules ARCHITECTURE.md does not name: every module of the core, policies/ and train/ by its name (a
    package by its folder's, a module of a sub-package by its own and its folder's), every family of envs/
    and tools/ by its folder's name, each as a word of the text."""
    import re

    def named(word: str) -> bool:
        return re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", doc) is not None

    missing = []
    for folder in ("agentgym", "policies", "train"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts or rel.name == "__main__.py" or rel.as_posix() == "__init__.py":
                continue
            names = [*rel.parent.parts, *([] if rel.name == "__init__.py" else [rel.stem])]
            if not all(named(n) for n in names):
                missing.append(path.relative_to(ROOT).as_posix())
    for folder in ("envs", "tools"):
        missing += [f"{folder}/{d.name}" for d in sorted((ROOT / folder).iterdir())
                    if d.is_dir() and (d / "__init__.py").exists() and not named(d.name)]
    return missing


def test_architecture_md_names_every_module():
    missing = unnamed_modules((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert not missing, "ARCHITECTURE.md does not name: " + ", ".join(missing)


def test_a_module_left_out_of_architecture_md_is_reported():
    doc = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert "train/collectors/async_collector.py" in unnamed_modules(doc.replace("async_collector", "async"))
    assert "envs/remote" in unnamed_modules(doc.replace("remote", "far"))


# The core's floors: the env contract, the rollout engine on it, the tools over both (ARCHITECTURE.md).
CORE_TOOLS = {"checker", "step_checks", "episode_checks", "oracle_check", "scaffold", "doctor", "cli", "cli_envs",
              "eval", "__main__"}


def core_floor(module: str) -> str:
    """'contract', 'engine' or 'tools' for a module of the core (`agentgym` itself counts as a tool: it
    re-exports and names wings)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in CORE_TOOLS:
        return "tools"
    return "engine" if parts[1] == "engine" else "contract"


FLOOR_MAY_IMPORT = {"contract": {"contract"}, "engine": {"contract", "engine"},
                    "tools": {"contract", "engine", "tools"}}


def floor_violations(path: Path) -> list[str]:
    module = module_name(path)
    floor = core_floor(module)
    bad: dict[tuple[int, str], str] = {}  # one report per line and floor
    for line, target in imported_modules(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
        if folder_of(target) != "core" or target == "agentgym":
            continue
        if core_floor(target) not in FLOOR_MAY_IMPORT[floor]:
            bad.setdefault((line, core_floor(target)),
                           f"{path.relative_to(ROOT).as_posix()}:{line}: {floor} -> {core_floor(target)} ({target})")
    return list(bad.values())


def test_the_env_contract_imports_nothing_of_the_engine_or_the_tools():
    files = [p for p in (ROOT / "agentgym").rglob("*.py") if "__pycache__" not in p.parts]
    floors = {core_floor(module_name(p)) for p in files}
    assert floors == {"contract", "engine", "tools"}
    assert core_floor("agentgym.engine.rollout") == "engine" and core_floor("agentgym.trajectory") == "contract"
    bad = [v for p in files for v in floor_violations(p)]
    assert not bad, "imports against the core's floors:\n" + "\n".join(bad)


def test_a_contract_module_importing_the_engine_is_reported(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    (tmp_path / "agentgym").mkdir()
    (tmp_path / "agentgym" / "trajectory.py").write_text("def f():\n    from agentgym.engine.rollout import run\n")
    assert floor_violations(tmp_path / "agentgym" / "trajectory.py") == [
        "agentgym/trajectory.py:2: contract -> engine (agentgym.engine.rollout)"]
