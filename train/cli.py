"""`agentgym train CONFIG.yaml [key=value ...]`: the one training script (also `python -m agentgym.train`)."""
from __future__ import annotations

import argparse


DESCRIPTION = ("Train with a YAML config (a path or a preset name from agentgym/train/configs/) and dotted "
               "overrides, e.g. `agentgym train toy_learning algorithm.estimator=grpo train.iterations=10`.")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("train", help="train a policy with multi-turn RL (GiGPO, GRPO, PPO/GAE, ...)",
                              description=DESCRIPTION)
    return _configure(p)


def _configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("config", nargs="?", help="YAML file or preset name (quickstart_cpu, toy_learning, "
                                             "household_cpu_vllm, household_gpu_vllm, ...)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. algorithm.gamma=0.9")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    p.add_argument("--options", action="store_true",
                   help="list every option with its default and doc, the estimators and the updaters, and exit")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from agentgym.errors import ConfigError
    from agentgym.train.config import context_line, load_config

    if args.options:
        from agentgym.train.options import format_options

        print(format_options())
        return 0
    if args.config is None:
        raise ConfigError("name a config: agentgym train PRESET_OR_YAML [key=value ...] (agentgym train --options "
                          "lists every key)")

    config = load_config(args.config, args.overrides)
    if args.print_config:
        import yaml

        from agentgym.train.config_loader import plain_values

        print(yaml.safe_dump(plain_values(config.to_dict()), sort_keys=False))
        return 0
    print(context_line(config))
    if config.sft.enabled:  # warm start first; RL then starts from the SFT checkpoint
        from agentgym.train.sft.run import with_sft_start

        config = with_sft_start(config)
    from agentgym.train.trainer import train

    run_dir = train(config)
    print(f"run dir: {run_dir}  (metrics: {run_dir / 'metrics.jsonl'}, checkpoint: {run_dir / 'latest'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    import sys

    from agentgym.errors import AgentGymError

    parser = _configure(argparse.ArgumentParser(prog="python -m agentgym.train", description=DESCRIPTION))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except AgentGymError as exc:
        print(f"agentgym train: error: {exc}", file=sys.stderr)
        return 2
