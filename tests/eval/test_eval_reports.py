"""Results JSON (schema), markdown table and the self-contained HTML report, from real env episodes."""
import base64
import json

import jsonschema
import pytest

from agentgym.errors import ConfigError
from agentgym.eval.records import EvalConfig, EvalRecord, EvalRun
from agentgym.eval.reports import SCHEMA_PATH, build_results, load_results, render_markdown, validate_results
from agentgym.eval.writer import write_all, write_comparison
from agentgym.registration import SuiteEntry

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
EVIL = '</pre><script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2"> | pipe'


def make_run(tmp_path, episodes, name="run"):
    """Oracle on KeyDoor, a hostile model on Calculator (tool calls, errors, HTML in its text)."""
    entries = (SuiteEntry("agentgym/Toy-KeyDoor-v0"), SuiteEntry("agentgym/Toy-Calculator-v0", label="calc"))
    config = EvalConfig(policy="oracle", entries=entries, out_dir=str(tmp_path / name), suite="toy", episodes=2,
                        samples=2, seed=7)
    calls = iter(['<tool_call>{"name": "calculate", "arguments": {"expression": "2+2"}}</tool_call>',
                  '<tool_call>{"name": "nope", "arguments": {}}</tool_call>', EVIL] * 10)
    records = [EvalRecord(entries[0].name, episodes.play(entries[0].env_id, seed, episodes.oracle, sample=s))
               for seed in (7, 8) for s in (0, 1)]
    records += [EvalRecord("calc", episodes.play(entries[1].env_id, seed, lambda *a: next(calls), sample=s))
                for seed in (7, 8) for s in (0, 1)]
    (tmp_path / name).mkdir()
    return EvalRun(config, tuple(records), started=100.0, finished=112.5, ran_now=8)


def test_results_validate_against_the_schema_and_hold_every_trajectory(tmp_path, episodes):
    run = make_run(tmp_path, episodes)
    results = json.loads(json.dumps(build_results(run)))
    validate_results(results)
    assert len(results["trajectories"]) == 8
    keydoor, calc = results["envs"]
    assert keydoor["metrics"]["success_rate"] == 1.0 and calc["metrics"]["success_rate"] == 0.0
    assert calc["metrics"]["tool_calls"] > 0 and calc["metrics"]["tool_errors"] > 0
    assert results["summary"]["macro_success_rate"] == 0.5
    assert results["summary"]["metrics"]["tasks"] == 4  # seed 7 of two envs are two tasks
    assert results["run"]["complete"] is True and results["run"]["wall_s"] == 12.5


def test_schema_rejects_broken_results(tmp_path, episodes):
    results = json.loads(json.dumps(build_results(make_run(tmp_path, episodes))))
    bad = json.loads(json.dumps(results))
    bad["envs"][0]["metrics"]["success_rate"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        validate_results(bad)
    bad = json.loads(json.dumps(results))
    del bad["trajectories"][0]["trajectory"]["turns"][0]["action"]
    with pytest.raises(jsonschema.ValidationError):
        validate_results(bad)
    assert json.loads(SCHEMA_PATH.read_text())["properties"]["schema_version"] == {"const": 1}


def test_write_all_writes_json_markdown_and_escaped_html(tmp_path, episodes):
    run = make_run(tmp_path, episodes)
    paths = write_all(run)
    validate_results(load_results(run.config.out_dir))
    md = open(paths["markdown"]).read()
    assert "| agentgym/Toy-KeyDoor-v0 | 4 | 100.0% [51.0%, 100.0%]" in md
    assert "| calc | 4 | 0.0%" in md and "toy (all)" in md
    page = open(paths["html"]).read()
    assert "<script>window.__pwned" not in page and "&lt;script&gt;window.__pwned" in page
    assert "http://" not in page and "https://" not in page  # nothing to fetch: opens offline
    assert page.count('<details class="traj"') == 8


def test_markdown_marks_an_incomplete_run(tmp_path, episodes):
    run = make_run(tmp_path, episodes)
    short = EvalRun(run.config, run.records[:3], run.started, run.finished, 3)
    assert "**incomplete**" in render_markdown(build_results(short))


def test_comparison_of_two_runs(tmp_path, episodes):
    a, b = make_run(tmp_path, episodes, "before"), make_run(tmp_path, episodes, "after")
    write_all(a)
    write_all(b)
    png = tmp_path / "curves.png"
    png.write_bytes(base64.b64decode(PIXEL))
    paths = write_comparison([a.config.out_dir, b.config.out_dir], tmp_path / "cmp", ["base", "trained"], [png])
    md = open(paths["markdown"]).read()
    assert "| env | base | trained | change |" in md and "| calc | 0.0% [0.0%, " in md and "(0/" in md and "| +0.0 pts |" in md
    page = open(paths["html"]).read()
    assert 'href="../before/report.html"' in page and f"data:image/png;base64,{PIXEL}" in page
    with pytest.raises(ConfigError, match="does not exist"):
        write_comparison([a.config.out_dir], tmp_path / "cmp", images=[tmp_path / "nope.png"])
    with pytest.raises(ConfigError, match="one name per run"):
        write_comparison([a.config.out_dir], tmp_path / "cmp", names=["x", "y"])
