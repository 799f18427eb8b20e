"""The learners: what one iteration's update does with a collected batch, each a class with its own state.

The learner a config trains with is its updater's (train/updaters/__init__.py: `updater_for(config).learner`,
one registry for the update seam: the name, the options it refuses, and the class here that runs it):
  - token_ppo  token_ppo.py   clipped PPO over generated tokens (IGPO, EPO, a GAE critic, decoupled async PPO)
  - choice_ppo choice.py      clipped PPO over the env's admissible actions (expert replay)
  - archer     archer.py      an off-policy turn critic from a replay buffer + the token actor
  - lookahead  lookahead.py   the choice update of the looked-ahead turns
Every learner is built by `from_config(config, ctx)`, the one place it reads the whole config: it takes the
trainer's `LearnerContext` and its own sections (`UpdateSections`: algorithm, optim, train, rollout; ArCHer
adds the critic model's path, choice the expert replay built from the sft section), and implements
`update(collected, samples, iteration, metrics) -> bool` (True: the weights changed and the trainer pushes
them) and `state_dict` / `load_state_dict` (what a checkpoint keeps of it).
"""
from __future__ import annotations

import importlib
from typing import Any


def build_learner(config: Any, ctx: Any) -> Any:
    """The learner of `config`'s updater, built on the trainer's LearnerContext with its sections."""
    from agentgym.train.updaters import updater_for

    module, _, name = updater_for(config).learner.partition(":")
    return getattr(importlib.import_module(module), name).from_config(config, ctx)
