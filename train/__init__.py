"""Training (`agentgym train`): what the trainer is made of, one folder per part.

    trainer.py     the loop: collect -> guards before -> learner step -> push weights -> guards after ->
                   log / eval / checkpoint; `train(config)`
    collectors/    how a batch is played: sync, broadcast (train.distributed), async (train.mode=async),
                   lookahead; a registry, one class each with its own state
    learners/      what an update does: token PPO, choice, ArCHer, lookahead; one class each, chosen by the
                   updater registry (updaters/__init__.py)
    config.py      the config dataclass tree, validated with how-to-fix messages; config_loader.py: YAML,
                   dotted overrides, presets
    algorithm.py   its `algorithm:` section: the estimator and one sub-section per concern (loss, shaping, ...)
    options.py     `agentgym train --options`: every option, its default and doc
    batch.py       the record types (Sample, Batch, Scored, Targets) estimators build and updaters consume
    samples.py     trajectories -> training samples; setup.py, checkpoint.py, metrics.py, critic.py,
                   guardrails.py, distributed.py, tiny.py: the frame's other parts
    estimators/    the estimator registry; advantages.py (GiGPO, GRPO, RLOO, REINFORCE++, GAE maths, numpy),
                   targets.py (per-token targets), igpo.py (information-gain turn rewards)
    updaters/      the update seam's registry (each updater's learner and refusals); token_ppo.py (free
                   generation), choice_ppo.py (admissible mode), archer.py, lookahead.py, losses.py (PPO
                   surrogate, KL, entropy, value loss)
    sft/           the supervised warm start (`agentgym sft`)
    configs/       the presets (`agentgym train PRESET`)

Nothing heavy is imported here: torch and transformers load when a trainer is built.
"""
