"""Defaults that fit: every env family registers its horizon and the context settings its long episodes fit
in, `agentgym eval` / `train` use them unless told otherwise (and say what they chose); every turn limit comes
from the measured gold path (agentgym/gold_paths.json) and none is below it; and at those defaults the oracle
solves every task on seeds drawn fresh each run, never stopped by `max_turns`, `context_full` or a state it has
no action for (every id of every family with an oracle; the seeds are printed)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import agentgym
from agentgym.cli_envs import check_oracles
from agentgym.errors import RegistrationError
from agentgym.eval.records import EvalConfig
from agentgym.envs.scienceworld import EXPLORE_FLOOR
from agentgym.envs.scienceworld.tasks import EXPERIMENT_CAP
from agentgym.horizon import (ContextDefaults, choose, context_defaults, context_lines, gold_paths, limit_for,
                              limit_source, random_outcome, turn_limit)
from agentgym.oracle_check import play_oracle, fresh_seeds, has_oracle
from agentgym.registration import SuiteEntry, registered_context
from test_all_envs import ALL_IDS, family

WRAPPERS = {"agentgym/Remote", "agentgym/Rubric"}  # they play another env: its registration decides


def test_every_family_registers_its_context():
    families = {family(e) for e in ALL_IDS} - WRAPPERS
    missing = sorted(f for f in families if not any(registered_context(e) for e in ALL_IDS if family(e) == f))
    assert missing == [], f"families without ContextDefaults: {missing}"
    boil = context_defaults("agentgym/ScienceWorld-boil-v0")
    assert boil.layout == "fold" and boil.horizon == agentgym.spec("agentgym/ScienceWorld-boil-v0").max_episode_steps


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MEASURED_FAMILIES = ("ScienceWorld", "Household", "Toy", "Search", "WebShop", "TextWorld")


def test_the_margin_rule():
    assert [limit_for(n) for n in (1, 4, 5, 111, 174)] == [3, 6, 8, 167, 261]
    assert all(limit_for(n) >= n + 2 for n in range(1, 400))
    with pytest.raises(ValueError):
        limit_for(0)


def test_no_registered_turn_limit_is_below_its_gold_path():
    measured = [e for e in ALL_IDS if gold_paths(e) is not None]
    assert len(measured) >= 50, "gold_paths.json lost its rows"
    short = {e: (agentgym.spec(e).max_episode_steps, limit_for(gold_paths(e).longest)) for e in measured
             if (agentgym.spec(e).max_episode_steps or 0) < limit_for(gold_paths(e).longest)}
    assert short == {}, f"limits below the gold path + margin (registered, needed): {short}"
    for family_name in MEASURED_FAMILIES:
        ids = [e for e in ALL_IDS if e.startswith(f"agentgym/{family_name}-")]
        assert ids and all(limit_source(e) for e in ids), f"{family_name}: ids not registered through turn_limit"
    science = [e for e in ALL_IDS if e.startswith("agentgym/ScienceWorld-")]
    assert len(science) == 30 and all(gold_paths(e) for e in science)  # every task measured
    genetics = {e for e in science if "mendelian" in e}
    assert len(genetics) == 2 and all(random_outcome(e) for e in genetics)  # declared, with their cap
    assert all(agentgym.spec(e).max_episode_steps == max(EXPLORE_FLOOR, limit_for(gold_paths(e).longest))
               for e in science if e not in genetics)
    # test variation 1119 (seed 497125389): a block on sandpaper, a 743-turn gold path; 2 variations a split said 319
    assert agentgym.spec("agentgym/ScienceWorld-inclined-plane-friction-named-surfaces-v0").max_episode_steps > 743
    assert all(agentgym.spec(e).max_episode_steps == max(EXPERIMENT_CAP, limit_for(gold_paths(e).longest))
               for e in genetics)
    assert not any(random_outcome(e) for e in ALL_IDS if e not in genetics)


def test_turn_limit_says_where_the_number_came_from():
    assert turn_limit("agentgym/Toy-KeyDoor-v0") == 8  # 5 turns + max(2, 50%)
    assert turn_limit("agentgym/Toy-KeyDoor-v0", 10, "a budget") == 10
    assert "10: a budget; above the gold-path limit 5 + max(2, 0.5 x 5) = 8" in limit_source("agentgym/Toy-KeyDoor-v0")
    assert turn_limit("agentgym/Toy-KeyDoor-v0", 3, "too short") == 8  # never below the gold path's limit
    assert "the budget 3 (too short) is below it" in limit_source("agentgym/Toy-KeyDoor-v0")
    turn_limit("agentgym/Toy-KeyDoor-v0", 10, "the learning runs' budget")  # as registered again
    with pytest.raises(RegistrationError, match="benchmarks/horizons.py --write --env test/Unmeasured-v0"):
        turn_limit("test/Unmeasured-v0")
    with pytest.raises(RegistrationError, match="with a why"):
        turn_limit("test/Unmeasured-v0", 5)
    assert turn_limit("test/Unmeasured-v0", 5, "a game file of the user's") == 5


@pytest.mark.slow
def test_the_table_is_what_the_benchmark_measures():
    """gold_paths.json's rows for the fast families are what benchmarks/horizons.py measures today."""
    horizons = load_benchmark("horizons")
    for family_name in ("Toy", "Household"):
        for env_id in horizons.family_ids(family_name):
            row = gold_paths(env_id)
            lengths, failed, _ = horizons.measure(env_id, family_name, horizons.FAMILIES[family_name][2], 1000)
            assert failed == 0 and (len(lengths), min(lengths), max(lengths)) == \
                (row.episodes, row.shortest, row.longest), env_id


def test_a_scienceworld_re_measure_never_lowers_a_stored_longest_path(tmp_path, monkeypatch):
    """Gold paths of one ScienceWorld variation differ from run to run: --write keeps the longest seen there,
    and elsewhere stores what it measured."""
    import json

    import agentgym.horizon as horizon

    horizons = load_benchmark("horizons")
    stored = {"ids": {"a": {"episodes": 6, "shortest": 20, "median": 40, "longest": 126, "measured": "6"},
                      "b": {"episodes": 6, "shortest": 20, "median": 40, "longest": 126, "measured": "6"}}}
    monkeypatch.setattr(horizon, "GOLD_PATHS_FILE", tmp_path / "gold_paths.json")
    horizon.GOLD_PATHS_FILE.write_text(json.dumps(stored))
    again = horizon.GoldPaths(episodes=30, shortest=18, median=34, longest=114, measured="30")
    horizons.write_rows({"a": again}, keep_longest=True)
    horizons.write_rows({"b": again})
    rows = json.loads(horizon.GOLD_PATHS_FILE.read_text())["ids"]
    assert rows["a"]["longest"] == 126 and rows["a"]["episodes"] == 30 and "126 from an earlier" in rows["a"]["measured"]
    assert rows["b"]["longest"] == 114 and rows["b"]["measured"] == "30"


def oracle_families() -> list[str]:
    return sorted({family(e) for e in ALL_IDS if family(e) not in WRAPPERS and has_oracle(e)})


def _with_their_time(families: list[str]) -> list:
    """ScienceWorld's 30 ids play its Java simulator, some for hundreds of oracle turns: 260-420 s in earlier full runs
    here, then on a slower day past the suite's 600 s both beside the suite and alone (24 of 30 ids done in 600 s,
    progressing), so it gets 30 minutes: a hang still ends; the other families keep the default."""
    return [pytest.param(f, marks=pytest.mark.timeout(1800)) if f.endswith("ScienceWorld") else f for f in families]


@pytest.mark.slow
@pytest.mark.parametrize("family_prefix", _with_their_time(oracle_families()))
def test_every_oracle_solves_fresh_seeds_within_the_defaults(family_prefix, capsys):
    """`agentgym check --oracle` over every id of a family, one fresh seed an id (two for the fast families):
    no episode stopped by the turn limit, a full context or a missing oracle action, and every task not declared
    random solved. A failure prints its seed and the command that plays it again."""
    name = family_prefix.split("/", 1)[1]
    ids = [e for e in ALL_IDS if family(e) == family_prefix and has_oracle(e)]
    if name == "SWE":
        pytest.importorskip("docker")
    episodes = 1 if name in ("ScienceWorld", "TextWorld", "SWE", "MiniWoB", "Web") else 2
    code = check_oracles(ids, None, episodes, None)
    printed = capsys.readouterr().out
    with capsys.disabled():
        print(f"\n{printed}")
    skipped = [line for line in printed.splitlines() if line.startswith("skipped")]
    if len(skipped) == len(ids):
        pytest.skip(f"{name}: {skipped[0]}")
    assert code == 0, printed


def test_the_oracle_check_fails_a_limit_below_the_gold_path_and_prints_the_seed(capsys):
    from agentgym.cli import main

    agentgym.register("test/ShortKeyDoor-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=3, override=True)
    assert main(["check", "--oracle", "test/ShortKeyDoor-v0", "agentgym/Toy-KeyDoor-v0", "--episodes", "2"]) == 1
    printed = capsys.readouterr().out
    failed = [line for line in printed.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and "test/ShortKeyDoor-v0  0/2 solved (limit 3); seeds " in failed[0]
    seed = int(failed[0].rsplit("seeds ", 1)[1].split(",")[0])
    assert seed not in (0, 1) and f"seed {seed}: max_turns at 3 turns (limit 3)" in printed
    assert f"(again: agentgym check --oracle test/ShortKeyDoor-v0 --seeds {seed})" in printed
    assert "ok      agentgym/Toy-KeyDoor-v0  2/2 solved in 5-5 turns (limit 10)" in printed
    assert main(["check", "--oracle", "test/ShortKeyDoor-v0", "--seeds", str(seed)]) == 1  # the same episode
    assert f"seeds {seed}\n" in capsys.readouterr().out
    assert main(["check", "agentgym/Toy-KeyDoor-v0", "--episodes", "3"]) == 2
    assert main(["check", "--oracle", "--family", "Nope"]) == 2
    refused = capsys.readouterr().err
    assert "--episodes and --split choose the episodes of --oracle; add --oracle" in refused
    assert "no env family 'Nope'; families: " in refused and "ScienceWorld" in refused


def test_fresh_seeds_differ_from_run_to_run():
    first, second = fresh_seeds(4), fresh_seeds(4)
    assert len(set(first)) == 4 and first != second and min(first + second) >= 10_000


def test_a_missing_oracle_action_is_a_failure_not_a_skip():
    from agentgym.envs.toy.keydoor import KeyDoorEnv

    class Clueless(KeyDoorEnv):
        def oracle_action(self):
            return None

    agentgym.register("test/Clueless-v0", Clueless, max_turns=10, override=True)
    [episode] = play_oracle("test/Clueless-v0", [12345])
    assert episode.end_reason == "no_action" and episode.problem and "no oracle action at turn 0" in episode.describe()


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
    limit = agentgym.spec("agentgym/ScienceWorld-boil-v0").max_episode_steps  # from its gold path
    assert line.startswith(f"context for agentgym/ScienceWorld-boil-v0 (horizon {limit} turns): layout=fold (env)")
    assert "max_context_tokens=12000 (you)" in line and "fold_at_tokens=auto (default)" in line
