"""check_env warns (without failing) when an env's observations or episodes do not fit the context it declares."""
from __future__ import annotations

import agentgym
from agentgym.engine.budget_check import EpisodeSizes, budget_warnings
from agentgym.horizon import ContextDefaults

FITS = EpisodeSizes(system=500, first=600, turns=(80, 90, 100))
TRAJ = {"layout": "trajectory", "max_context_tokens": 8192, "max_observation_tokens": 1024}


def test_an_episode_that_fits_gets_no_warning():
    assert budget_warnings(FITS, TRAJ, horizon=50) == []


def test_first_and_typical_observations_over_the_budget():
    big = EpisodeSizes(system=500, first=3000, turns=(2000, 2500, 100))
    warnings = budget_warnings(big, TRAJ, horizon=2)
    assert any("first observation is 3000 tokens" in w for w in warnings)
    assert any("typical observation is 2000 tokens" in w for w in warnings)


def test_a_long_horizon_outgrows_the_trajectory_layout_but_not_a_fold():
    [warning] = budget_warnings(FITS, TRAJ, horizon=120)  # 1100 + 120 * 122 > 8192
    assert "episode of 120 typical turns" in warning and "fold" in warning
    assert budget_warnings(FITS, {**TRAJ, "layout": "fold"}, horizon=120) == []
    assert budget_warnings(FITS, {**TRAJ, "layout": "step", "history_turns": 2}, horizon=120) == []


def test_a_fold_budget_too_small_for_two_turns():
    [warning] = budget_warnings(FITS, {**TRAJ, "layout": "fold", "fold_at_tokens": 1200}, horizon=120)
    assert "fold budget of 1200" in warning


def test_first_prompt_that_does_not_fit():
    warnings = budget_warnings(EpisodeSizes(500, 900, (50,)), {"layout": "trajectory", "max_context_tokens": 1000},
                               horizon=1)
    assert any("first prompt (1400 tokens)" in w for w in warnings)


def test_check_env_reports_budget_warnings():
    agentgym.register("test/TinyBudget-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=10, override=True,
                      context=ContextDefaults(layout="trajectory", max_context_tokens=600, max_observation_tokens=20))
    report = agentgym.check_env("test/TinyBudget-v0", seeds=(0,))
    assert "context budget" in report.checks
    assert any("first observation" in w and "budget of 20" in w for w in report.budget_warnings)
    assert any("episode of 10 typical turns" in w for w in report.budget_warnings)
    clean = agentgym.check_env("agentgym/Toy-KeyDoor-v0", seeds=(0,))
    assert "context budget" in clean.checks and clean.budget_warnings == ()


def test_agentgym_check_prints_the_warnings(capsys):
    from agentgym.cli import main

    agentgym.register("test/TinyBudget-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=10, override=True,
                      context=ContextDefaults(max_observation_tokens=20))
    assert main(["check", "test/TinyBudget-v0", "--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "warning: [context budget] the first observation is" in out
