"""Shared test settings and fixtures.

Hypothesis runs without its per-example deadline (the CI machine has 2 shared cores, so wall-clock
deadlines only make tests flaky) and without an example database on disk.
"""
from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, settings

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


# Under pytest-xdist (`-n 2 --dist loadgroup`, the README's test command) the unit of work is a group: every
# test file is one, so a module's fixtures (an engine, a JVM, a browser) start once, and the files that start
# vLLM engines share one, run one after another on one worker (two engines starting at once on 2 cores took a
# worker down). That group goes first and the files with slow tests next, so the workers finish together.
VLLM_GROUP = "vllm"


def schedule_groups(modules: list[tuple[str, set[str]]]) -> list[tuple[str, str]]:
    """[(module, its markers' names)] in collection order -> [(module, group)] in the order to hand out:
    the vLLM modules first, then modules with a slow test, then the rest, each in collection order."""
    def rank(marks: set[str]) -> int:
        return 0 if "vllm" in marks else 1 if "slow" in marks else 2

    ordered = sorted(modules, key=lambda m: rank(m[1]))   # stable: collection order within a rank
    return [(module, VLLM_GROUP if "vllm" in marks else module) for module, marks in ordered]


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
