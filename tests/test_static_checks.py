"""Static checks hold: ruff finds nothing, and mypy (through scripts/typecheck.py, which makes the wings'
imports resolvable) reports no error beyond its recorded baseline, and does see across wing boundaries."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _typecheck():
    spec = importlib.util.spec_from_file_location("typecheck", REPO / "scripts" / "typecheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ruff_is_clean():
    pytest.importorskip("ruff", reason="the test extra installs ruff")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", str(REPO)],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:]


def test_mypy_sees_a_wrong_call_across_a_wing_boundary(tmp_path):
    """A file in no wing calls into agentgym.train (a folder the package-dir mapping hides) with a wrong
    type and into agentgym.policies with a right one: only the wrong call is reported."""
    pytest.importorskip("mypy", reason="the test extra installs mypy")
    wrong = tmp_path / "wrong_call.py"
    wrong.write_text("from agentgym.train.estimators import get_estimator\n"
                     "from agentgym.policies.vllm import engine_settings\n"
                     "get_estimator(42)\n"
                     "engine_settings(on_cpu=True, sleep_available=False)\n")
    typecheck = _typecheck()
    result = typecheck.run_mypy([str(wrong)])
    errors = [line for line in result.stdout.splitlines() if "wrong_call.py" in line and ": error:" in line]
    assert len(errors) == 1 and "get_estimator" in errors[0] and '"int"' in errors[0], result.stdout[-2000:]
    # and the repo itself has nothing beyond the baseline
    baseline = typecheck.BASELINE.read_text().splitlines()
    assert [line for line in typecheck.new_errors(result.stdout, baseline) if "wrong_call.py" not in line] == []
