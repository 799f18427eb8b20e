"""`agentgym` command line: list | info | check | play | eval | plot | train | sft | serve | swe | new | doctor.

Each subcommand lives in its own module with `add_parser(subparsers)`; those modules are light at
import time (heavy imports happen when a command runs), so `agentgym --help` is instant.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from agentgym import __version__
from agentgym.errors import AgentGymError

SUBCOMMAND_MODULES = (
    "agentgym.cli_envs",          # list, info, check, play
    "agentgym.eval.cli",          # eval, plot
    "agentgym.train.cli",         # train
    "agentgym.train.sft.cli",     # sft
    "agentgym.tools.retrieval.cli",  # serve retrieval
    "agentgym.envs.web.cli",      # serve shop
    "agentgym.envs.remote.cli",   # serve env
    "agentgym.train.gateway.cli",  # serve gateway
    "agentgym.envs.swe.cli",      # swe make-tasks, swe prepare
    "agentgym.scaffold",          # new env
    "agentgym.doctor",            # doctor
)


def serve_subparsers(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The `serve` command's sub-commands (retrieval, shop, env, gateway), creating `serve` the first time a
    module asks: each service's module adds its own parser under it."""
    serve = subparsers.choices.get("serve")
    if serve is None:
        serve = subparsers.add_parser("serve", help="run a shared service on loopback")
        serve.set_defaults(func=lambda args: serve.print_help() or 2)
    for action in serve._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return serve.add_subparsers(dest="service", metavar="SERVICE")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description="Train and evaluate LLM agents with multi-turn RL.")
    parser.add_argument("--version", action="version", version=f"agentgym {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):  # that part is not built/installed
                continue
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except AgentGymError as exc:  # expected failures get one line, not a traceback
        print(f"agentgym {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"agentgym {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `agentgym list | head`: the reader left; say nothing more to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
