"""`agentgym doctor` reports each part as found or missing, with a fix for what is missing."""
from __future__ import annotations

import subprocess
import sys

from agentgym import doctor


def test_doctor_reports_every_part_and_says_how_to_fix_missing_ones(monkeypatch):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)  # nothing on PATH
    monkeypatch.setattr(doctor, "_has", lambda module: module == "torch")
    items = {f.part: f for f in doctor.findings()}
    assert set(items) == {"torch", "GPU", "vLLM", "Docker daemon", "bubblewrap", "Chromium", "Java",
                          "llama.cpp server"}
    assert items["torch"].ok and items["torch"].required
    for part in ("GPU", "vLLM", "bubblewrap", "Chromium", "Java", "llama.cpp server"):
        assert not items[part].ok and items[part].fix, part
    assert "install.sh --vllm" in items["vLLM"].fix and "apt-get install bubblewrap" in items["bubblewrap"].fix
    text = doctor.render(list(items.values()))
    assert "fix: apt-get install chromium" in text


def test_missing_torch_fails_the_command(monkeypatch):
    monkeypatch.setattr(doctor, "_has", lambda module: False)
    assert doctor.run(None) == 1


def test_the_command_runs_here():
    out = subprocess.run([sys.executable, "-m", "agentgym", "doctor"], capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1) and "torch" in out.stdout and "Docker daemon" in out.stdout
