"""`agentgym swe make-tasks PATH`: synthesise validated bug tasks from a local Python repository.

    agentgym swe make-tasks ./mylib --out tasks/ --max-tasks 20 --backend bwrap
    agentgym swe prepare            # download the library sdists and make their tasks once (for SWE-Lib-v0)
"""
from __future__ import annotations

import argparse
import os
import sys

from agentgym.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    swe = subparsers.add_parser("swe", help="SWE envs: make bug tasks from a repository, prepare library tasks")
    sub = swe.add_subparsers(dest="swe_command", metavar="SWE_COMMAND")
    p = sub.add_parser("make-tasks", help="plant AST bugs in a repo and keep those its own tests catch")
    p.add_argument("path", help="a local Python repository with a pytest suite that passes")
    p.add_argument("--out", default=None, help="output folder for tasks.jsonl (default: PATH/../<name>-tasks)")
    p.add_argument("--max-tasks", type=int, default=20, help="stop after this many valid tasks (default: 20)")
    p.add_argument("--max-candidates", type=int, default=200, help="mutations to try at most (default: 200)")
    p.add_argument("--backend", default="auto", choices=("auto", "docker", "bwrap"),
                   help="sandbox the tests run in (default: auto = docker if usable, else bwrap)")
    p.add_argument("--seed", type=int, default=0, help="which mutations are tried first (default: 0)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per test run (default: 3x the clean run + 5)")
    p.add_argument("--no-deps", action="store_true",
                   help="do not install the repository's test requirements (read from pyproject, "
                        "requirements*test*.txt, tox.ini) from the package index; by default they are installed once and cached")
    p.set_defaults(func=cmd_make_tasks)
    p.add_argument("--split", default=None, choices=("train", "test"),
                   help="put every task in this split (hold a whole repository out for evaluation)")
    p = sub.add_parser("prepare", help="download the library sdists and make their tasks (cached)")
    p.add_argument("--backend", default="auto", choices=("auto", "docker", "bwrap"))
    p.add_argument("--corpus", action="store_true",
                   help="the corpus (tasks='corpus': 7 libraries, 2 held out as the test split) instead of SWE-Lib's 2")
    p.add_argument("--only", default=None, help="with --corpus: comma-separated library names to prepare")
    p.set_defaults(func=cmd_prepare)
    swe.set_defaults(func=lambda args: (swe.print_help(), 2)[1])


def cmd_make_tasks(args: argparse.Namespace) -> int:
    from agentgym.envs.swe.synth import check_repository, synthesize
    from agentgym.envs.swe.tasks import save_tasks

    if args.max_tasks < 1 or args.max_candidates < 1:
        raise ConfigError("--max-tasks and --max-candidates must be at least 1")
    if args.timeout is not None and args.timeout <= 0:
        raise ConfigError(f"--timeout must be > 0 seconds, got {args.timeout}")
    check_repository(os.path.abspath(args.path))
    repo = os.path.basename(os.path.abspath(args.path))
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.path)), f"{repo}-tasks")
    deps = None if args.no_deps else prepare_requirements(args.path, repo, _say)
    report = synthesize(args.path, repo=repo, backend=args.backend, max_tasks=args.max_tasks,
                        max_candidates=args.max_candidates, seed=args.seed, timeout_s=args.timeout,
                        progress=_say, deps=deps)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tasks.jsonl")
    tasks = report.tasks
    if args.split:
        import dataclasses

        tasks = tuple(dataclasses.replace(t, extra={**t.extra, "split": args.split}) for t in tasks)
    save_tasks(tasks, path)
    rejected = ", ".join(f"{k}: {v}" for k, v in sorted(report.rejected.items())) or "none"
    print(f"{len(report.tasks)} tasks from {report.tried} mutations tried ({report.baseline_passed} tests pass "
          f"before; rejected: {rejected}) in {report.seconds:.1f} s -> {path}")
    print(f"run them: agentgym.make('agentgym/SWE-Mini-v0', tasks={path!r})")
    return 0 if report.tasks else 1


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def prepare_requirements(repo_dir: str, repo: str, say):
    """Install the repository's test requirements (cached) and say what could not be had."""
    from agentgym.envs.swe.deps import install_requirements, read_test_requirements

    reqs = read_test_requirements(repo_dir)
    if not reqs.names:
        say(f"{repo}: no test requirements declared; the sandbox's Python and pytest run the tests")
        return None
    deps = install_requirements(reqs, repo, progress=say)
    if deps is not None:
        say(f"{repo}: test requirements from {', '.join(reqs.sources)}: {len(deps.installed)} installed"
            + (f"; could not satisfy: {'; '.join(deps.unsatisfied)}" if deps.unsatisfied else ""))
    return deps


def cmd_prepare(args: argparse.Namespace) -> int:
    from agentgym.envs.swe.sources import CORPUS, HELD_OUT, LIBRARIES, corpus_tasks, library_tasks

    if args.only and not args.corpus:
        raise ConfigError("--only needs --corpus (SWE-Lib's libraries are prepared together)")
    if args.corpus:
        known = [n for n, _ in CORPUS]
        names = args.only.split(",") if args.only else known
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"--only: unknown library {unknown[0]!r}; the corpus has {', '.join(known)}")
        failed = 0
        for name, version in CORPUS:
            if name in names:
                try:
                    tasks = corpus_tasks(args.backend, progress=_say, names=[name])
                except ConfigError as exc:  # one library's problem does not stop the others
                    print(f"{name}=={version}: no tasks: {exc}")
                    failed += 1
                    continue
                print(f"{name}=={version}: {len(tasks)} tasks ({'test' if name in HELD_OUT else 'train'} split)")
        return 1 if failed else 0
    for name, version in LIBRARIES:
        tasks = library_tasks(name, version, args.backend, progress=_say)
        print(f"{name}=={version}: {len(tasks)} tasks")
    return 0
