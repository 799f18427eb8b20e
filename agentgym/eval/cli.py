"""`agentgym eval`, `agentgym plot` and `agentgym compare`: argument parsing only, work happens elsewhere."""
from __future__ import annotations

import argparse
import sys

from agentgym.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    _add_eval(subparsers)
    _add_plot(subparsers)
    _add_compare(subparsers)


def _add_eval(subparsers: argparse._SubParsersAction) -> None:
    from agentgym.eval.runner import DEFAULT_SEED
    from agentgym.engine.rollout import LAYOUTS, RolloutConfig

    R = RolloutConfig()  # the defaults every mode shares (train embeds this config)

    p = subparsers.add_parser(
        "eval", help="evaluate a policy on a suite of envs and write JSON, markdown and HTML reports",
        description="Evaluate a policy on envs x episodes x samples. Results go to --out; re-running with the "
                    "same --out resumes an interrupted eval without recomputing finished episodes.")
    p.add_argument("--policy", required=True, metavar="SPEC",
                   help="hf:MODEL | openai:URL[#model] | vllm:MODEL | random | oracle | scripted:FILE:FUNC | "
                        "checkpoint:DIR")
    what = p.add_argument_group("what to evaluate (exactly one)")
    what.add_argument("--suite", metavar="NAME", help="a registered suite (toy, household, search, ...)")
    what.add_argument("--suite-file", metavar="F.yaml", help="your own suite: a YAML list of env ids/kwargs/labels")
    what.add_argument("--env", nargs="+", default=[], metavar="ID", help="one or more env ids")
    p.add_argument("--episodes", type=int, default=10, help="tasks (seeds) per env (default 10)")
    p.add_argument("--samples", type=int, default=1, help="rollouts per task; pass@k for k <= samples (default 1)")
    p.add_argument("--split", default="test",
                   help="task split passed to reset (default test); the report prints the split each env drew "
                        "from (household resolves test to test_unseen)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help=f"first task seed; seeds are SEED..SEED+episodes-1 (default {DEFAULT_SEED}, held out "
                        "from training seeds)")
    p.add_argument("--out", required=True, metavar="DIR", help="where results, reports and the resume log go")
    p.add_argument("--max-turns", type=int, default=None, help="turn limit (default: each env's own)")
    p.add_argument("--workers", type=int, default=4, help="envs stepped concurrently (default 4)")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature (default 0 with one sample, 1.0 with several)")
    p.add_argument("--max-tokens", type=int, default=R.sampling.max_tokens,
                   help=f"max new tokens per turn (default {R.sampling.max_tokens})")
    ctx = p.add_argument_group("context (default: what each env registers for its horizon, else the engine's; "
                               "the chosen values are printed)")
    ctx.add_argument("--layout", choices=LAYOUTS, default=None,
                     help="prompt layout, as the model was trained: whole conversation, a history window, or a "
                          f"conversation folded into summaries (engine default {R.layout})")
    ctx.add_argument("--history-turns", type=int, default=None,
                     help=f"step layout: past turns per prompt (engine default {R.history_turns})")
    ctx.add_argument("--max-context-tokens", type=int, default=None,
                     help=f"context limit; 0 = none (engine default {R.max_context_tokens})")
    ctx.add_argument("--max-observation-tokens", type=int, default=None,
                     help="truncate observations to this; 0 = never (engine default: never)")
    ctx.add_argument("--fold-at-tokens", type=int, default=None,
                     help="fold layout: fold once a prompt would pass this (default 3/4 of the context limit)")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse finished episodes in --out (default on); --no-resume starts afresh")
    p.add_argument("--async", dest="async_mode", action="store_true",
                   help="send each episode's next request as soon as its env step returns (for openai:/vllm: servers)")
    p.add_argument("--keep-prompt-ids", action="store_true",
                   help="store every turn's prompt token ids too (large: they repeat the conversation)")
    p.add_argument("--retry-failed", action=argparse.BooleanOptionalAction, default=True,
                   help="on resume, re-run episodes that ended in a policy or env error (default on)")
    p.add_argument("--tool-format", default="auto", metavar="NAME",
                   help="how the model writes tool calls (hermes, llama3, mistral, qwen3_coder, harmony, ...; "
                        "default auto: from its chat template)")
    p.add_argument("--opponent", default=None, metavar="SPEC",
                   help="pit --policy against SPEC on the suite's two-player envs, every seed in both seat orders "
                        "(win/draw/loss with intervals, OUT/versus.json; TextArena games play opponent=seats)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_eval_command)


def run_eval_command(args: argparse.Namespace) -> int:
    from agentgym.eval.reports import load_results, render_markdown
    from agentgym.eval.runner import EvalConfig, run_eval
    from agentgym.eval.suites import resolve_envs

    suite_name, entries = resolve_envs(args.suite, args.suite_file, args.env)
    if getattr(args, "opponent", None):
        from agentgym.eval.versus import run_versus_command

        return run_versus_command(args, entries)
    config = EvalConfig(policy=args.policy, entries=tuple(entries), out_dir=args.out, suite=suite_name,
                        episodes=args.episodes, samples=args.samples, split=args.split, seed=args.seed,
                        max_turns=args.max_turns, workers=args.workers, temperature=args.temperature,
                        max_tokens=args.max_tokens, layout=args.layout, history_turns=args.history_turns,
                        max_context_tokens=args.max_context_tokens,
                        max_observation_tokens=args.max_observation_tokens, fold_at_tokens=args.fold_at_tokens,
                        resume=args.resume,
                        keep_prompt_ids=args.keep_prompt_ids, async_mode=args.async_mode,
                        retry_failed=args.retry_failed, tool_format=args.tool_format)
    from agentgym.horizon import context_lines

    for line in context_lines({e.env_id: config.context_settings(e.env_id) for e in entries}, config.given_context()):
        print(line, file=sys.stderr)  # stdout stays the report
    run = run_eval(config, progress=not args.no_progress and sys.stderr.isatty())
    resumed = len(run.records) - run.ran_now
    if resumed:
        print(f"resumed {resumed} finished episode(s) from {args.out}; ran {run.ran_now} now")
    print(render_markdown(load_results(run.paths["results"])))
    print(f"results: {run.paths['results']}\nmarkdown: {run.paths['markdown']}\nhtml report: {run.paths['html']}")
    return 0


def _add_plot(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plot", help="draw training curves (success/return vs iteration) to a PNG",
                              description="Plot RUN_DIR/metrics.jsonl of one or more training runs, overlaid.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="training run dirs holding metrics.jsonl")
    p.add_argument("--out", default="curves.png", help="PNG path (default curves.png)")
    p.add_argument("--metric", action="append", default=None, metavar="KEY",
                   help="panel to draw (repeatable; default: success and return)")
    p.add_argument("--label", action="append", default=None, help="legend label per run (repeatable)")
    p.set_defaults(func=run_plot_command)


def run_plot_command(args: argparse.Namespace) -> int:
    from agentgym.eval.plots import plot_runs

    if not args.out.lower().endswith(".png"):
        raise ConfigError(f"--out must name a .png file, got {args.out!r}")
    path = plot_runs(args.run_dirs, args.out, tuple(args.metric or ("success", "return")), args.label)
    print(f"wrote {path}")
    return 0


def _add_compare(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="compare eval runs (e.g. before/after training) in one table",
                              description="Write compare.md and compare.html over several `agentgym eval` dirs.")
    p.add_argument("eval_dirs", nargs="+", metavar="EVAL_DIR", help="dirs written by `agentgym eval --out`")
    p.add_argument("--out", required=True, metavar="DIR", help="where compare.md and compare.html go")
    p.add_argument("--name", action="append", default=None, help="column name per run (repeatable)")
    p.add_argument("--image", action="append", default=[], metavar="PNG",
                   help="a PNG to inline into compare.html, e.g. curves from `agentgym plot` (repeatable)")
    p.set_defaults(func=run_compare_command)


def run_compare_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agentgym.eval.writer import write_comparison

    paths = write_comparison(args.eval_dirs, args.out, args.name, args.image)
    print(Path(paths["markdown"]).read_text(encoding="utf-8"))
    print(f"markdown: {paths['markdown']}\nhtml report: {paths['html']}")
    return 0
