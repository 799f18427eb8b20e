"""Every preset in train/configs/ (and the defaults) resolves to the values it resolved to when the snapshot was
taken (tests/train/data/preset_values.json, written from main before the train/ redesign of issue 49): moving a
section or a check between modules must not change what a preset trains with.

A preset edited on purpose changes its YAML's hash; refresh its entry with
    python3 tests/train/test_preset_values.py --write
and review the diff of the JSON (only that preset's values may move).
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from agentgym.train.config import PRESET_DIR, load_config

SNAPSHOT = Path(__file__).parent / "data" / "preset_values.json"
DEFAULTS = "(defaults)"


def resolved(name: str | None) -> dict:
    """The preset's options as plain JSON values (tuples as lists), as the snapshot holds them."""
    return json.loads(json.dumps(load_config(name).to_dict()))


def yaml_hash(name: str) -> str:
    return hashlib.sha256((PRESET_DIR / f"{name}.yaml").read_bytes()).hexdigest()


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def test_the_snapshot_covers_the_presets_it_was_taken_from():
    snap = json.loads(SNAPSHOT.read_text())
    assert DEFAULTS in snap and len(snap) >= 14
    assert set(snap) - {DEFAULTS} <= set(presets()), "a preset in the snapshot was deleted: refresh it (--write)"


@pytest.mark.parametrize("name", [DEFAULTS, *presets()])
def test_every_preset_loads_the_values_of_the_snapshot(name):
    snap = json.loads(SNAPSHOT.read_text())
    now = resolved(None if name == DEFAULTS else name)  # every preset loads
    if name not in snap:
        pytest.skip(f"{name} is newer than the snapshot: it loads; add it with --write")
    entry = snap[name]
    if name != DEFAULTS and entry["yaml_sha256"] != yaml_hash(name):
        pytest.skip(f"{name}.yaml was edited since the snapshot: refresh its entry with --write")
    assert now == entry["resolved"]


def write() -> None:
    snap = {name: {"yaml_sha256": yaml_hash(name), "resolved": resolved(name)} for name in presets()}
    snap[DEFAULTS] = {"yaml_sha256": "", "resolved": resolved(None)}
    SNAPSHOT.write_text(json.dumps(snap, sort_keys=True, indent=1) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write()
