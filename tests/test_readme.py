"""The README stays a short introduction whose code runs: the "Register your own env" snippet runs as written, its
quick-start commands are the project scripts, every `agentgym ...` line parses with the real command line, and
every relative link names a file in the repo. The long text lives in docs/ (tests/test_docs.py)."""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(heading):
    return README.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]


def _snippet(heading):
    return re.search(r"```python\n(.*?)```", _section(heading), re.S).group(1)


def test_registration_snippet_runs_and_passes_the_checker():
    code = _snippet("Register your own env in ~30 lines")
    assert len(code.strip().splitlines()) <= 45
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    passed = out.stdout.strip().removeprefix("passed: ").split(", ")
    assert {"gymnasium", "determinism", "any string", "oracle", "turn limit", "close"} <= set(passed)


def test_quick_start_commands_are_the_project_scripts():
    quick = _section("Quick start")
    assert "bash scripts/quickstart.sh" in quick and "bash .ci/run" in quick
    assert (ROOT / ".ci" / "run").is_file() and (ROOT / "scripts" / "quickstart.sh").is_file()


def test_readme_is_short_and_its_test_command_is_cis():
    assert len(README.splitlines()) <= 300
    (command,) = re.findall(r"```bash\n(python3 -m pytest [^\n]*)\n```", _section("Tests"))
    ci = (ROOT / ".ci" / "run").read_text()
    assert all(arg in ci for arg in shlex.split(command)[3:]), "the README's test command is .ci/run's"


def _agentgym_lines():
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            if line.startswith("agentgym "):
                yield shlex.split(line.split("  #", 1)[0])[1:]


def test_every_agentgym_command_in_the_readme_parses():
    from agentgym.cli import build_parser

    lines = list(_agentgym_lines())
    assert {argv[0] for argv in lines} >= {"list", "info", "play", "eval", "train"}   # the tour
    for argv in lines:
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"`agentgym {' '.join(argv)}` does not parse (exit {exc.code})")


def test_relative_links_name_files_in_the_repo():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert "docs/index.md" in local and "CHANGELOG.md" in local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing
