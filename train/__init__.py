"""Training (`agentgym train`): what the trainer is made of, one folder per part.

    trainer.py     rollout -> advantages -> update -> push weights -> eval -> checkpoint; `train(config)`
    config.py      the config dataclass tree: YAML + dotted overrides, validated with how-to-fix messages
    options.py     `agentgym train --options`: every option, its default and doc
    batch.py       the record types (Sample, Batch, Scored, Targets) estimators build and updaters consume
    samples.py     trajectories -> training samples; setup.py, checkpoint.py, metrics.py, critic.py,
                   guardrails.py, distributed.py, tiny.py: the frame's other parts
    estimators/    the estimator registry; advantages.py (GiGPO, GRPO, RLOO, REINFORCE++, GAE maths, numpy),
                   targets.py (per-token targets), igpo.py (information-gain turn rewards)
    updaters/      the update seam's registry; token_ppo.py (free generation), choice_ppo.py (admissible
                   mode), losses.py (PPO surrogate, KL, entropy, value loss)
    sft/           the supervised warm start (`agentgym sft`)
    configs/       the presets (`agentgym train PRESET`)

Nothing heavy is imported here: torch and transformers load when a trainer is built.
"""
