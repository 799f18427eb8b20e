"""Every registered env (built-in families and plugins, including ones added later) keeps the contract:
`check_env` passes, and random/adversarial strings thrown at `step` never raise and are flagged invalid.

An env whose optional dependency is missing is skipped with the reason."""
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym
from agentgym.checker import GARBAGE_ACTIONS, as_missing_dependency, check_env, check_step_result
from agentgym.errors import MissingDependencyError

# Families with dozens of ids (TextArena, MiniWoB, ScienceWorld) are sampled so the suite stays inside CI's time
# (one ScienceWorld check alone takes ~20-60 s); TextArena's and ScienceWorld's own tests cover every id,
# MiniWoB's every id is checked only with AGENTGYM_ALL_ENVS=1.
SMALL_FAMILY, PER_BIG_FAMILY = 8, 2


def family(env_id: str) -> str:
    """'agentgym/ScienceWorld-boil-v0' -> 'agentgym/ScienceWorld'."""
    namespace, _, name = env_id.rpartition("/")
    return f"{namespace}/{name.split('-')[0]}"


def sample_per_family(env_ids: list[str], per_family: int, small: int = SMALL_FAMILY) -> list[str]:
    """Every id of a family of at most `small` ids, else `per_family` ids spread evenly over its sorted
    ids (all of them when AGENTGYM_ALL_ENVS=1): every family, including plugins added later, is checked."""
    if os.environ.get("AGENTGYM_ALL_ENVS") == "1":
        return list(env_ids)
    families: dict[str, list[str]] = {}
    for env_id in sorted(env_ids):
        families.setdefault(family(env_id), []).append(env_id)
    picked = set()
    for ids in families.values():
        if len(ids) <= small:
            picked.update(ids)
            continue
        step = max(1, -(-len(ids) // per_family))
        picked.update(ids[::step][:per_family])
    return [e for e in env_ids if e in picked]


try:
    ALL_IDS = agentgym.list_envs()
    ENV_IDS = sample_per_family(ALL_IDS, PER_BIG_FAMILY)
    DISCOVERY_ERROR = None
except Exception as exc:  # reported by test_discovery_works; the per-env tests then have nothing to run
    ALL_IDS, ENV_IDS, DISCOVERY_ERROR = [], [], exc


ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
PIECES = ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "<action>", "</action>", "{", "}", '"name"',
          '"arguments"', "\n", " ", "look", "go to", "take", "open", "search", "submit", "answer"]
ANY_ACTION = st.one_of(
    st.text(alphabet=ANY_CHAR, max_size=300),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(alphabet=ANY_CHAR, max_size=6)), max_size=30).map("".join),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
    st.sampled_from([text for _, text in GARBAGE_ACTIONS]),
)
# No letters, no tags or JSON: no env can read a command, a call or an answer in these.
NO_LETTERS = st.characters(min_codepoint=0, max_codepoint=0x10FFFF,
                           exclude_categories=("Lu", "Ll", "Lt", "Lm", "Lo"), exclude_characters="<>{}[]")
NONSENSE = st.text(alphabet=NO_LETTERS, max_size=80).filter(lambda t: not re.fullmatch(r"\s*\d+\s*\.?\s*", t))

SEED = 0  # one task per env: some envs take seconds to build a new one
_ENVS: dict = {}


def _env(env_id):
    """One instance per env id for all of a test's examples (making some envs is not cheap)."""
    if env_id not in _ENVS:
        try:
            _ENVS[env_id] = agentgym.make(env_id)
            _ENVS[env_id].reset(seed=SEED)  # some envs start their heavy parts (browser, sandbox) here
        except ImportError as exc:
            _ENVS[env_id] = as_missing_dependency(exc)
            if _ENVS[env_id] is None:
                raise
    if isinstance(_ENVS[env_id], MissingDependencyError):
        pytest.skip(f"{env_id}: optional dependency missing: {_ENVS[env_id]}")
    return _ENVS[env_id]


@pytest.fixture(scope="module", autouse=True)
def _close_envs():
    yield
    for env in _ENVS.values():
        if not isinstance(env, Exception):
            env.close()


def test_discovery_works():
    if DISCOVERY_ERROR is not None:
        raise DISCOVERY_ERROR
    assert "agentgym/Toy-KeyDoor-v0" in ENV_IDS


def test_every_family_is_sampled():
    ids = ["a/Big-%d-v0" % i for i in range(10)] + ["a/Small-v0", "b/Big-1-v0"]
    picked = sample_per_family(ids, 3, small=8)
    assert {family(e) for e in picked} == {family(e) for e in ids}
    assert sum(family(e) == "a/Big" for e in picked) == 3 and "a/Small-v0" in picked


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id):
    try:
        report = check_env(env_id, seeds=(0,))  # one seed: some envs take seconds to build a new task
    except MissingDependencyError as exc:
        pytest.skip(f"{env_id}: optional dependency missing: {exc}")
    assert {"api", "determinism", "any string", "close"} <= set(report.checks)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=20)
@given(actions=st.lists(ANY_ACTION, min_size=1, max_size=3))
def test_step_never_raises(env_id, actions):
    env = _env(env_id)
    env.reset(seed=SEED)
    for action in actions:
        obs, _, terminated, truncated, _ = check_step_result(env, env.step(action), f"action {action[:60]!r}")
        if terminated or truncated:
            env.reset(seed=SEED)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=20)
@given(action=NONSENSE)
def test_nonsense_is_invalid(env_id, action):
    env = _env(env_id)
    _, info = env.reset(seed=SEED)
    admissible = [a.lower() for a in info.get("admissible_actions", []) if a.strip()]
    if any(a in action.lower() for a in admissible):
        return
    obs, _, _, _, info = check_step_result(env, env.step(action), f"action {action[:60]!r}")
    assert info["valid_action"] is False, f"{env_id} took {action[:60]!r} as a valid action"
    assert obs.strip(), "an invalid action must get feedback"
