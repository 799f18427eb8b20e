"""What a report's title and header say: the envs given with --env, the split the envs resolved, the wall
time beside the mean episode time, and which columns are details."""
import json

import pytest

import agentgym
from agentgym.cli import main
from agentgym.eval import runner
from agentgym.eval.reports import (TABLE_COLUMNS, build_results, detail_columns, render_markdown, split_text,
                                   subject)

from test_eval_reports import make_run  # noqa: E402  (same folder; pytest puts it on sys.path)

KEYDOOR, CALC, PICK = "agentgym/Toy-KeyDoor-v0", "agentgym/Toy-Calculator-v0", "agentgym/Household-PickPlace-v0"


def eval_cli(capsys, out, *argv):
    code = main(["eval", "--policy", "oracle", "--episodes", "2", "--out", str(out), "--no-progress", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_title_names_the_envs_given_with_env(tmp_path, capsys):
    stdout = eval_cli(capsys, tmp_path / "one", "--env", KEYDOOR)
    assert stdout.splitlines()[0] == f"# Eval: oracle on {KEYDOOR}"
    page = (tmp_path / "one" / "report.html").read_text()
    assert f"<title>agentgym eval: oracle on {KEYDOOR}</title>" in page and "on custom" not in page
    stdout = eval_cli(capsys, tmp_path / "two", "--env", KEYDOOR, CALC)
    assert stdout.splitlines()[0] == f"# Eval: oracle on {KEYDOOR}, {CALC}"
    assert "| all envs | 4 |" in stdout and "custom" not in stdout
    stdout = eval_cli(capsys, tmp_path / "suite", "--suite", "toy")
    assert stdout.splitlines()[0] == "# Eval: oracle on toy" and "| toy (all) |" in stdout


def test_subject_of_many_envs_stays_short():
    results = {"run": {"suite": "custom"}, "envs": [{"name": f"x/Env{i}-v0"} for i in range(5)]}
    assert subject(results) == "x/Env0-v0, x/Env1-v0 and 3 more envs"
    assert subject({**results, "run": {"suite": "household"}}) == "household"


def test_header_prints_the_split_the_env_resolved(tmp_path, capsys, monkeypatch):
    if PICK not in agentgym.list_envs():
        pytest.skip("the household envs are not registered")
    out = tmp_path / "household"
    stdout = eval_cli(capsys, out, "--env", PICK, "--split", "test")
    assert "split test_unseen (asked for test) · seeds 1000000..1000001" in stdout.splitlines()[2]
    results = json.loads((out / "results.json").read_text())
    assert results["run"]["split"] == "test" and results["envs"][0]["split"] == "test_unseen"
    assert all("/test_unseen/" in r["trajectory"]["task_id"] for r in results["trajectories"])
    assert "split test_unseen (asked for test)" in (out / "report.html").read_text()

    def no_env(*args, **kwargs):
        raise AssertionError("a finished eval re-renders without making any env")

    monkeypatch.setattr(runner, "make", no_env)  # resumed with nothing to run: the split comes from OUT
    stdout = eval_cli(capsys, out, "--env", PICK, "--split", "test")
    assert "ran 0 now" in stdout and "split test_unseen (asked for test) ·" in stdout
    monkeypatch.undo()

    stdout = eval_cli(capsys, tmp_path / "exact", "--env", PICK, "--split", "test_unseen")
    assert "split test_unseen · seeds" in stdout and "asked for" not in stdout
    stdout = eval_cli(capsys, tmp_path / "toy", "--env", KEYDOOR)  # an env that takes the split as given
    assert "split test · seeds" in stdout


def test_split_text_of_envs_that_resolve_differently():
    def results(*splits):
        return {"run": {"split": "test"}, "envs": [{"name": str(i), "split": s} for i, s in enumerate(splits)]}

    assert split_text(results("test", "test")) == "test"
    assert split_text(results("test_unseen", "test_unseen")) == "test_unseen (asked for test)"
    assert split_text(results("test", "test_unseen", "test_unseen")) == "test (2 env(s) resolved it to test_unseen)"
    assert split_text({"run": {"split": "dev"}, "envs": [{"name": "old results without a split"}]}) == "dev"


def test_time_is_the_mean_per_episode_and_the_header_has_the_wall_and_workers(tmp_path, episodes):
    run = make_run(tmp_path, episodes)
    results = build_results(run)
    md = render_markdown(results)
    assert "(sum)" not in md and "| s / episode |" in md.splitlines()[4]
    assert "8 episodes on 4 worker(s) · wall 12.5 s" in md
    for env in results["envs"]:
        walls = [r.trajectory.wall_s for r in run.records if r.env == env["name"]]
        row = next(line for line in md.splitlines() if line.startswith(f"| {env['name']} |"))
        assert row.split(" | ")[TABLE_COLUMNS.index("s / episode")].rstrip(" |") == f"{sum(walls) / len(walls):.2f}"


def test_detail_columns_are_those_that_say_little_in_this_run(tmp_path, episodes):
    results = build_results(make_run(tmp_path, episodes))  # 2 samples per task; calc makes tool calls
    assert detail_columns(results) == {"mean tokens"}
    results["run"]["samples"] = 1
    for env in results["envs"]:
        env["metrics"]["tool_calls"] = 0
    assert detail_columns(results) == {"mean tokens", "pass@k", "tool calls (errors)"}
