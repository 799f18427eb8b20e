"""The README's "Register your own env" snippet runs as written, and its quick-start commands exist."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _snippet(heading):
    section = README.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_registration_snippet_runs_and_passes_the_checker():
    code = _snippet("Register your own env in ~30 lines")
    assert len(code.strip().splitlines()) <= 45
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    passed = out.stdout.strip().removeprefix("passed: ").split(", ")
    assert {"gymnasium", "determinism", "any string", "oracle", "turn limit", "close"} <= set(passed)


def test_quick_start_commands_are_the_project_scripts():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "bash scripts/quickstart.sh" in quick and "bash .ci/run" in quick
    assert (ROOT / ".ci" / "run").is_file()
