"""Defaults that fit: every env family registers its horizon and the context settings its long episodes fit
in, `agentgym eval` / `train` use them unless told otherwise (and say what they chose), and at those defaults
the oracle's episode never ends `context_full` (every family, sampled as tests/test_all_envs.py does)."""
from __future__ import annotations

import pytest

import agentgym
from agentgym.checker import as_missing_dependency
from agentgym.errors import MissingDependencyError, RegistrationError
from agentgym.eval.records import EvalConfig
from agentgym.horizon import ContextDefaults, choose, context_defaults, context_lines
from agentgym.policies.scripted import OraclePolicy
from agentgym.registration import SuiteEntry, registered_context
from agentgym.rollout import RolloutConfig, rollout
from test_all_envs import ALL_IDS, PER_BIG_FAMILY, family, sample_per_family

WRAPPERS = {"agentgym/Remote", "agentgym/Rubric"}  # they play another env: its registration decides
ORACLE_IDS = [e for e in sample_per_family(ALL_IDS, PER_BIG_FAMILY) if family(e) not in WRAPPERS]


def eval_settings(env_id: str) -> dict:
    """What `agentgym eval --env ENV_ID` runs with when given no context option."""
    return EvalConfig(policy="oracle", entries=(SuiteEntry(env_id),), out_dir="-").context_settings(env_id)


def test_every_family_registers_its_context():
    families = {family(e) for e in ALL_IDS} - WRAPPERS
    missing = sorted(f for f in families if not any(registered_context(e) for e in ALL_IDS if family(e) == f))
    assert missing == [], f"families without ContextDefaults: {missing}"
    boil = context_defaults("agentgym/ScienceWorld-boil-v0")
    assert boil.layout == "fold" and boil.horizon == 250  # the horizon defaults to the turn limit


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ORACLE_IDS)
def test_the_oracle_never_fills_the_context_at_the_defaults(env_id):
    settings = eval_settings(env_id)
    config = RolloutConfig(**settings, executor="serial")
    try:
        [traj] = rollout(env_id, OraclePolicy(), None, seeds=[1_000_000], config=config,
                         reset_options={"split": "test"})
    except (ImportError, MissingDependencyError) as exc:
        missing = exc if isinstance(exc, MissingDependencyError) else as_missing_dependency(exc)
        if missing is None:
            raise
        pytest.skip(f"{env_id}: optional dependency missing: {missing}")
    if traj.end_reason == "failed":
        if "no oracle_action" in str(traj.error) or "has no action" in str(traj.error):
            pytest.skip(f"{env_id} has no oracle")
        if "MissingDependency" in str(traj.error) or "not installed" in str(traj.error):
            pytest.skip(f"{env_id}: {traj.error}")
    assert traj.end_reason != "context_full", \
        f"{env_id} at its defaults {settings}: context full after {traj.num_turns} turns"


def test_user_settings_win_over_the_env_and_the_env_over_the_engine():
    engine = {"layout": "trajectory", "history_turns": 2, "max_context_tokens": 8192, "max_observation_tokens": None,
              "fold_at_tokens": None}
    chosen = choose("agentgym/ScienceWorld-boil-v0", {"max_context_tokens": 4096}, engine)
    assert chosen["layout"] == "fold" and chosen["max_context_tokens"] == 4096
    assert chosen["max_observation_tokens"] == 2048 and chosen["history_turns"] == 2
    assert choose("no/Such-v0", {}, engine) == engine  # nothing registered: the engine's defaults
    config = EvalConfig(policy="oracle", entries=(SuiteEntry("agentgym/Toy-KeyDoor-v0"),), out_dir="-",
                        max_context_tokens=0, layout="step")
    assert config.context_settings("agentgym/Toy-KeyDoor-v0")["max_context_tokens"] is None  # 0 = no limit
    [line] = context_lines({"agentgym/Toy-KeyDoor-v0": config.context_settings("agentgym/Toy-KeyDoor-v0")},
                           config.given_context())
    assert "layout=step (you)" in line and "max_observation_tokens=512 (env)" in line and "horizon 10" in line


def test_bad_context_defaults_are_refused_at_registration():
    with pytest.raises(RegistrationError, match="layout must be one of"):
        ContextDefaults(layout="window")
    with pytest.raises(RegistrationError, match="max_context_tokens must be"):
        ContextDefaults(max_context_tokens=-1)
    with pytest.raises(RegistrationError, match="ContextDefaults"):
        agentgym.register("test/BadContext-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=3,
                          context={"layout": "fold"})


def test_eval_prints_what_it_chose(tmp_path, capsys):
    from agentgym.cli import main

    out = tmp_path / "eval"
    assert main(["eval", "--policy", "oracle", "--env", "agentgym/Toy-KeyDoor-v0", "agentgym/Household-PickPlace-v0",
                 "--episodes", "1", "--out", str(out), "--no-progress", "--max-context-tokens", "6000"]) == 0
    printed = capsys.readouterr().err
    assert "context for agentgym/Toy-KeyDoor-v0 (horizon 10 turns): layout=trajectory (env), " \
           "max_context_tokens=6000 (you), max_observation_tokens=512 (env)" in printed
    assert "context for agentgym/Household-PickPlace-v0 (horizon 50 turns)" in printed


def test_train_prints_what_it_chose():
    from agentgym.train.config import config_from_dict, context_line

    cfg = config_from_dict({"rollout": {"env": "agentgym/ScienceWorld-boil-v0", "max_context_tokens": 12000}})
    line = context_line(cfg)
    assert line.startswith("context for agentgym/ScienceWorld-boil-v0 (horizon 250 turns): layout=fold (env)")
    assert "max_context_tokens=12000 (you)" in line and "fold_at_tokens=auto (default)" in line
