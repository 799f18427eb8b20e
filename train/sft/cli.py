"""`agentgym sft CONFIG|PRESET [key=value ...]`: behaviour cloning with a training config's `sft:` section."""
from __future__ import annotations

import argparse

DESCRIPTION = ("Supervised warm start: clone expert demonstrations (sft.source=expert, the default), an eval's "
               "successful episodes (sft.source=trajectories sft.path=EVAL_DIR) or chat transcripts "
               "(sft.source=transcripts sft.path=FILE.jsonl), with the config's model, layout and chat template. "
               "E.g. `agentgym sft quickstart_cpu sft.episodes=32`. The checkpoint (RUN_DIR/sft/ckpt-N) is a "
               "`checkpoint:` policy and an RL start (model.policy=checkpoint:DIR).")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("sft", help="supervised warm start (behaviour cloning) before RL",
                              description=DESCRIPTION)
    p.add_argument("config", help="YAML file or preset name (quickstart_cpu, toy_learning, ...)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. sft.epochs=2")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from agentgym.train.config import load_config

    config = load_config(args.config, args.overrides)
    if config.optim.optimizer != "adamw":
        from agentgym.errors import ConfigError

        raise ConfigError(f"optim.optimizer={config.optim.optimizer} is the RL stage's: agentgym sft trains with "
                          "AdamW at sft.lr; drop the override here (agentgym train keeps it for the RL after the sft stage)")
    from agentgym.train.sft.run import sft, sft_run_dir

    ckpt = sft(config)
    run_dir = sft_run_dir(config)
    print(f"sft checkpoint: {ckpt}  (metrics: {run_dir / 'metrics.jsonl'}, loss curve: {run_dir / 'sft_loss.png'})")
    acts = "admissible:" if config.rollout.action_mode == "admissible" else ""  # as the RL stage will act
    print(f"evaluate it: agentgym eval --policy {acts}checkpoint:{ckpt} ...; RL from it: agentgym train CONFIG "
          f"model.policy=checkpoint:{ckpt}")
    return 0
