"""What an eval's records say: the results document (validated by schema.json), table rows, markdown.

Pure functions of records and results; `agentgym.eval.html` renders the same rows as HTML and
`agentgym.eval.writer` writes the files.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from agentgym import __version__
from agentgym.errors import ConfigError, require
from agentgym.eval.metrics import Metrics, compute_metrics, macro_success
from agentgym.eval.records import CUSTOM_SUITE, EvalRun
from agentgym.trajectory import json_safe

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("schema.json")


def build_results(run: EvalRun) -> dict[str, Any]:
    """The results document: plain JSON types only, in the shape schema.json describes."""
    cfg = run.config
    per_env: dict[str, Metrics] = {}
    envs = []
    for entry in cfg.entries:
        trajs = [r.trajectory for r in run.records if r.env == entry.name]
        per_env[entry.name] = compute_metrics(trajs)
        envs.append({"name": entry.name, "env_id": entry.env_id, "kwargs": json_safe(entry.kwargs),
                     "split": run.splits.get(entry.name, cfg.split), "context": cfg.context_settings(entry.env_id),
                     "metrics": per_env[entry.name].to_dict()})
    pooled = compute_metrics([r.trajectory for r in run.records], [(r.env, r.trajectory.seed) for r in run.records])
    return {
        "schema_version": SCHEMA_VERSION,
        "agentgym_version": __version__,
        "run": {"policy": cfg.policy, "suite": cfg.suite, "split": cfg.split, "seed": cfg.seed,
                "episodes": cfg.episodes, "samples": cfg.samples, "max_turns": cfg.max_turns,
                "temperature": cfg.sampling_temperature, "max_tokens": cfg.max_tokens, "workers": cfg.workers,
                "layout": cfg.layout, "history_turns": cfg.history_turns,
                "max_context_tokens": cfg.max_context_tokens, "max_observation_tokens": cfg.max_observation_tokens,
                "fold_at_tokens": cfg.fold_at_tokens, "started": run.started, "finished": run.finished, "wall_s": run.finished - run.started,
                "ran_now": run.ran_now, "complete": len(run.records) == len(cfg.entries) * cfg.episodes * cfg.samples},
        "envs": envs,
        "summary": {"macro_success_rate": macro_success(per_env), "metrics": pooled.to_dict()},
        "trajectories": [r.to_dict() for r in run.records],
    }


def validate_results(results: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when `results` does not match schema.json."""
    jsonschema = require("jsonschema", "test")
    jsonschema.validate(results, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def load_results(path: str | Path) -> dict[str, Any]:
    """Read results.json from a file or an eval's OUT dir."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise ConfigError(f"no eval results at {str(path)!r}; run `agentgym eval ... --out DIR` first")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{str(path)!r} is not valid JSON ({exc.msg}); re-run the eval to rewrite it") from exc


# ---------------------------------------------------------------------------------------------- markdown
def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _success_cell(m: dict[str, Any]) -> str:
    return f"{_pct(m['success_rate'])} [{_pct(m['success_ci_low'])}, {_pct(m['success_ci_high'])}]"


def _pass_cell(m: dict[str, Any]) -> str:
    return " / ".join(f"@{k} {_pct(v)}" for k, v in m["pass_at_k"].items()) or "-"


TABLE_COLUMNS = ("env", "episodes", "success (95% CI)", "pass@k", "mean return", "mean turns", "mean tokens",
                 "invalid actions", "tool calls (errors)", "s / episode")


def metric_row(name: str, m: dict[str, Any]) -> list[str]:
    """One table row's cells, shared by the markdown and HTML tables. The time is the mean of each episode's
    own wall time: episodes run side by side (--workers), so their sum says nothing about the eval's wall."""
    return [name, str(m["episodes"]), _success_cell(m), _pass_cell(m), f"{m['mean_return']:.3f}",
            f"{m['mean_turns']:.2f}", f"{m['mean_total_tokens']:.0f}", _pct(m["invalid_action_rate"]),
            f"{m['tool_calls']} ({m['tool_errors']})", f"{m['mean_episode_wall_s']:.2f}"]


def detail_columns(results: dict[str, Any]) -> set[str]:
    """Columns rarely needed in this run, which the HTML table shows only on request: token counts, pass@k
    with one sample per task (it equals the success rate then), tool calls when no env made any."""
    detail = {"mean tokens"}
    if results["run"]["samples"] == 1:
        detail.add("pass@k")
    if not any(e["metrics"]["tool_calls"] for e in results["envs"]):
        detail.add("tool calls (errors)")
    return detail


def subject(results: dict[str, Any]) -> str:
    """What was evaluated, for titles: the suite's name, or the envs themselves when given with --env."""
    suite = results["run"]["suite"]
    if suite != CUSTOM_SUITE:
        return suite
    names = [e["name"] for e in results["envs"]]
    return ", ".join(names) if len(names) <= 3 else f"{', '.join(names[:2])} and {len(names) - 2} more envs"


def split_text(results: dict[str, Any]) -> str:
    """The split the tasks came from, as the envs resolved the one asked for (household: test -> test_unseen)."""
    asked = results["run"]["split"]
    by_split: dict[str, int] = {}
    for env in results["envs"]:
        resolved = env.get("split", asked)  # results written before envs reported their split
        by_split[resolved] = by_split.get(resolved, 0) + 1
    if list(by_split) == [asked]:
        return asked
    if len(by_split) == 1:
        return f"{next(iter(by_split))} (asked for {asked})"
    return f"{asked} (" + "; ".join(f"{n} env(s) resolved it to {s}" for s, n in by_split.items() if s != asked) + ")"


def run_line(results: dict[str, Any]) -> str:
    """The line under a report's title: split, seeds, samples, temperature, workers and the eval's wall time."""
    run = results["run"]
    return (f"split {split_text(results)} · seeds {run['seed']}..{run['seed'] + run['episodes'] - 1} · "
            f"{run['samples']} sample(s) per task · temperature {run['temperature']} · "
            f"{len(results['trajectories'])} episodes on {run['workers']} worker(s) · wall {run['wall_s']:.1f} s")


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = [metric_row(e["name"], e["metrics"]) for e in results["envs"]]
    if len(results["envs"]) > 1:
        suite = results["run"]["suite"]
        total = "all envs" if suite == CUSTOM_SUITE else f"{suite} (all)"
        rows.append(metric_row(total, results["summary"]["metrics"]))
    return rows


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(results: dict[str, Any]) -> str:
    run = results["run"]
    lines = [f"# Eval: {_md_escape(run['policy'])} on {_md_escape(subject(results))}", "",
             _md_escape(run_line(results)) + ("" if run["complete"] else " — **incomplete**"), "",
             "| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in table_rows(results)]
    if len(results["envs"]) > 1:
        lines += ["", f"Macro success (each env once): {_pct(results['summary']['macro_success_rate'])}"]
    failed = [r for r in results["trajectories"] if r["trajectory"].get("error")]
    if failed:
        first = str(failed[0]["trajectory"]["error"]).strip().splitlines()[0][:300]
        lines += ["", f"**{len(failed)} episode(s) failed** (policy or env error; they count as failures). "
                      f"First: {_md_escape(failed[0]['env'])} seed {failed[0]['seed']}: `{first}`"]
    return "\n".join(lines) + "\n"


def comparison_rows(named: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """Success per env across several runs (e.g. before / after training): rate, Wilson 95% interval and
    successes / episodes of each run, and the change of the last run vs the first."""
    envs = list(dict.fromkeys(e["name"] for _, r in named for e in r["envs"]))
    header = ["env", *[n for n, _ in named]] + (["change"] if len(named) > 1 else [])
    rows = []
    for env in envs + ["(macro)"]:
        rates = [_rate(r, env) for _, r in named]
        cells = [_env_cell(r, env) if x is not None else "-" for x, (_, r) in zip(rates, named)]
        if len(named) > 1:
            first, last = rates[0], rates[-1]
            cells.append(f"{100 * (last - first):+.1f} pts" if first is not None and last is not None else "-")
        rows.append([env, *cells])
    return header, rows


def _env_cell(results: dict[str, Any], env: str) -> str:
    m = next((e["metrics"] for e in results["envs"] if e["name"] == env), None)
    if m is None:  # the macro row: a mean over envs, no interval
        return _pct(results["summary"]["macro_success_rate"])
    return f"{_success_cell(m)} ({m['successes']}/{m['episodes']})"


def episode_count_note(named: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """A sentence when the runs played different numbers of episodes (e.g. the base model on fewer tasks
    because a small sample already pins it near 0), else ""."""
    counts = [(n, len(r.get("trajectories", []))) for n, r in named]
    if len({c for _, c in counts}) <= 1:
        return ""
    listed = ", ".join(f"{n}: {c}" for n, c in counts)
    return (f"The runs played different numbers of episodes ({listed}): each interval is its own run's, and "
            "the paired rows compare only the episodes both runs played.")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_escape(c) for c in header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]


def render_comparison_markdown(named: Sequence[tuple[str, dict[str, Any]]]) -> str:
    from agentgym.eval.paired import paired_rows

    lines = _md_table(*comparison_rows(named))
    note = episode_count_note(named)
    if note:
        lines += ["", note]
    if len(named) > 1:  # the same tasks in each run: which ones changed, and is it more than chance
        lines += ["", "Paired, episode by episode (same env, seed and sample in both runs; exact McNemar test "
                      "on the tasks that changed):", "", *_md_table(*paired_rows(named))]
    return "\n".join(lines) + "\n"


def _rate(results: dict[str, Any], env: str) -> float | None:
    if env == "(macro)":
        return results["summary"]["macro_success_rate"]
    return next((e["metrics"]["success_rate"] for e in results["envs"] if e["name"] == env), None)
