"""Rubrics: weighted, named reward functions over the episode, on any env through `RubricWrapper` and
`agentgym/Rubric-v0`, from Python and from YAML (an eval suite file)."""
from __future__ import annotations

import json

import pytest

import agentgym
from agentgym.cli import main
from agentgym.errors import ConfigError
from agentgym.rubric import (Episode, Rubric, RubricItem, RubricWrapper, Step, contains_answer, exact_answer,
                             normalize_answer)


def episode(*actions: str, reference: str | None = "Paris", success: bool = False) -> Episode:
    steps = tuple(Step(a, f"obs {i}", 0.0, {"valid_action": "bad" not in a}) for i, a in enumerate(actions))
    return Episode("Capital of France?", "", steps, {"reference": reference}, success)


def test_scores_are_weighted_named_components():
    rubric = Rubric([RubricItem("correct", exact_answer, 2.0), RubricItem("short", lambda ep: len(ep.steps), -0.1)])
    scored = rubric.score(episode("look", "<answer>the paris</answer>"))
    assert scored.components == pytest.approx({"correct": 2.0, "short": -0.2})
    assert scored.raw == {"correct": 1.0, "short": 2.0} and scored.errors == {} and scored.total == pytest.approx(1.8)
    wrong = rubric.score(episode("<answer>Lyon</answer>"))
    assert wrong.components == pytest.approx({"correct": 0.0, "short": -0.1})


def test_failing_functions_are_recorded_and_score_nothing():
    def boom(ep):
        raise RuntimeError("judge unreachable")

    rubric = Rubric([RubricItem("ok", lambda ep: 1.0), RubricItem("boom", boom), RubricItem("none", lambda ep: None),
                     RubricItem("text", lambda ep: "high"), RubricItem("nan", lambda ep: float("nan")),
                     RubricItem("ref", exact_answer)])
    scored = rubric.score(episode("<answer>x</answer>", reference=None))
    assert scored.components == {"ok": 1.0}
    assert scored.errors == {"boom": "RuntimeError: judge unreachable", "none": "no score",
                             "text": "returned str, not a number", "nan": "returned nan", "ref": "no score"}


def test_episode_view():
    ep = episode("<tool_call>{}</tool_call>", "I think <answer> Paris </answer>")
    assert ep.answer == "Paris" and ep.reference == "Paris" and contains_answer(ep) == 1.0
    assert "AGENT (turn 2)" in ep.transcript() and len(episode("x" * 50_000).transcript(1000)) < 1100
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"


@pytest.mark.parametrize("config,needle", [
    ([], "non-empty list"),
    ([{"fn": "exact_answer"}, {"fn": "exact_answer"}], "unique"),
    ([{"name": "x", "fn": "no_such_builtin"}], "unknown reward function"),
    ([{"name": "x", "fn": "agentgym.nowhere:fn"}], "cannot import"),
    ([{"name": "x", "fn": "success", "weight": "heavy"}], "must be a number"),
    ([{"name": "x", "fn": "success", "wieght": 1}], "unknown key"),
    ([{"name": "x", "fn": "judge", "kwargs": {"model": "gpt:x"}}], "unknown judge"),
    ("success", "non-empty list"),
])
def test_bad_rubric_configs_are_one_line_errors(config, needle):
    with pytest.raises(ConfigError, match=needle):
        Rubric.from_config(config)


def test_wrapper_on_the_calculator_toy_terminated_and_truncated():
    env = RubricWrapper(agentgym.make("agentgym/Toy-Calculator-v0", max_turns=2),
                        [{"name": "solved", "fn": "success"}, {"name": "turns", "fn": "num_turns", "weight": -0.5},
                         {"name": "bad", "fn": "invalid_actions", "weight": -1.0}])
    env.reset(seed=3)
    obs, reward, term, trunc, info = env.step(env.oracle_action())
    # the env's own components are kept; the rubric's join them on the last step
    assert info["reward_components"] == pytest.approx({"outcome": 1.0, "solved": 1.0, "turns": -0.5, "bad": 0.0})
    assert reward == pytest.approx(1.5) and info["rubric_scores"]["solved"] == 1.0
    env.reset(seed=3)
    first = env.step("garbage")
    assert first[1] == 0.0 and "turns" not in first[4]["reward_components"]  # nothing until the episode ends
    _, reward, term, trunc, info = env.step("more garbage")
    assert trunc and not term and info["reward_components"] == pytest.approx({"solved": 0.0, "turns": -1.0,
                                                                              "bad": -2.0})
    env.close()


def test_rubric_env_replaces_the_env_reward_and_clashing_names_are_prefixed():
    env = agentgym.make("agentgym/Rubric-v0", env="agentgym/Toy-Calculator-v0",
                        rubric=[{"name": "outcome", "fn": "answered", "weight": 0.3}], keep_env_reward=True)
    env.reset(seed=1)
    info = env.step(env.oracle_action())[4]
    assert info["reward_components"] == pytest.approx({"outcome": 1.0, "rubric/outcome": 0.3})
    env.close()
    demo = agentgym.make("agentgym/Rubric-v0")  # defaults: the calculator scored by a demo rubric alone
    demo.reset(seed=1)
    _, reward, _, _, info = demo.step(demo.oracle_action())
    assert info["reward_components"] == pytest.approx({"solved": 1.0, "answered": 0.1, "turns": -0.01})
    assert reward == pytest.approx(1.09)
    demo.close()


def test_rubric_from_a_yaml_suite_through_agentgym_eval(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text("""
name: rubric-suite
envs:
  - id: agentgym/Rubric-v0
    label: calc-rubric
    kwargs:
      env: agentgym/Toy-Calculator-v0
      env_max_turns: 4
      keep_env_reward: false
      rubric:
        - {name: solved, fn: success, weight: 2.0}
        - {name: answered, fn: answered, weight: 0.5}
""")
    out = tmp_path / "out"
    code = main(["eval", "--policy", "oracle", "--suite-file", str(suite), "--episodes", "2", "--out", str(out),
                 "--no-progress", "--workers", "1"])
    assert code == 0, capsys.readouterr()
    rows = json.loads((out / "results.json").read_text())["trajectories"]
    last_turns = [r["trajectory"]["turns"][-1] for r in rows]
    assert [t["reward_components"] for t in last_turns] == [{"solved": 2.0, "answered": 0.5}] * 2
    assert all(t["reward"] == 2.5 for t in last_turns)
