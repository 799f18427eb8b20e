"""The same seed, the same task, for every registered id of a small family and a spread-out sample of
six ids of each family with dozens (all ids with AGENTGYM_ALL_ENVS=1, as tests/test_all_envs.py): GRPO and
GiGPO compare a group's rollouts as plays of one task, so an env whose reset(seed) or steps vary silently
breaks every group. Per id: Gymnasium's reset-seed and step determinism checks, reset(seed=123) twice with the
same observation and info, and three steps of the same actions with the same results
(`agentgym.checker.check_same_seed_same_task`). One instance per id; families whose dependency (Java,
Chromium, Docker, ...) is missing here are skipped with the reason.

Why a sample: every id took 959 s of a 69-minute CI run on a slow 2-core machine, 510 s of it MiniWoB's
130 ids (4 s each, one shared Chromium) and 400 s ScienceWorld's 30 (13 s each, a JVM each; its own test
checks every task in a second JVM). The full sweep is `AGENTGYM_ALL_ENVS=1 pytest tests/test_determinism_all.py`
or `python3 benchmarks/determinism_all.py [WORD]`, which prints the seconds per family; run it when an env
family's wrapper or the checker changes. Found by the full sweep (and fixed): MiniWoB stock-market and
terminal (wall-clock page timers; now virtual time) and seven ScienceWorld tasks (an oracle call left the
simulator naming objects differently)."""
from __future__ import annotations

import pytest

import agentgym
from agentgym.checker import as_missing_dependency, check_same_seed_same_task
from agentgym.errors import MissingDependencyError
from test_all_envs import sample_per_family  # same folder; pytest puts it on sys.path

ALL_IDS = agentgym.list_envs()
CHECKED_IDS = sample_per_family(ALL_IDS, per_family=6)


def test_every_family_is_here():
    assert len(ALL_IDS) >= 300 and "agentgym/ScienceWorld-grow-fruit-v0" in ALL_IDS


@pytest.fixture(scope="module", autouse=True)
def _one_browser():
    """One Chromium for every browser env of the module (each env would start and stop its own otherwise)."""
    from agentgym.tools.browser.runtime import acquire_runtime, release_runtime

    try:
        runtime = acquire_runtime()
    except Exception:  # no Chromium or Playwright here: the browser envs skip on their own
        yield
        return
    yield
    release_runtime(runtime)


@pytest.mark.parametrize("env_id", CHECKED_IDS)
def test_same_seed_same_task(env_id):
    try:
        env = agentgym.make(env_id)
    except ImportError as exc:
        missing = as_missing_dependency(exc)
        if missing is None:
            raise
        pytest.skip(f"{env_id}: optional dependency missing: {missing}")
    try:
        check_same_seed_same_task(env, seed=123, steps=3)
    except MissingDependencyError as exc:
        pytest.skip(f"{env_id}: optional dependency missing: {exc}")
    finally:
        env.close()
