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
