"""Shared test settings and fixtures.

Hypothesis runs without its per-example deadline (the CI machine has 2 shared cores, so wall-clock
deadlines only make tests flaky) and without an example database on disk.
"""
from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, settings

from xdist_groups import schedule_groups  # tests/ is on sys.path (rootdir-less test folder)

settings.register_profile("agentgym", deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("agentgym")


@pytest.fixture
def scratch_ids():
    """A list to append test-registered env ids to; they are unregistered after the test."""
    from agentgym import registration

    ids: list[str] = []
    yield ids
    for env_id in ids:
        gym.registry.pop(env_id, None)
        registration._IDS.discard(env_id)
        for entries in registration._SUITES.values():
            entries[:] = [e for e in entries if e.env_id != env_id]


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the xdist_group markers
def pytest_collection_modifyitems(config, items):
    if not getattr(config.option, "loadgroup", False):   # xdist sets it in each worker under --dist loadgroup
        return
    by_module: dict[str, list] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
    marks = {m: {mark.name for item in its for mark in item.iter_markers()} for m, its in by_module.items()}
    items[:] = []
    for module, group in schedule_groups([(m, marks[m]) for m in by_module]):
        for item in by_module[module]:
            item.add_marker(pytest.mark.xdist_group(group))
            items.append(item)
