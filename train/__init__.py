"""Training: advantage estimators, losses, config and the trainer (`agentgym train`).

    advantages.py  GiGPO, GRPO, RLOO, REINFORCE++, turn-level and bi-level GAE (pure numpy, vectorised)
    losses.py      PPO clipped surrogate (token/sequence/turn ratios, dual clip), KL k1/k3, entropy, value loss
    config.py      the config dataclass tree: YAML + dotted overrides, validated with how-to-fix messages
    trainer.py     rollout -> advantages -> PPO epochs -> push weights -> eval -> checkpoint; `train(config)`
    samples.py, targets.py, update.py, critic.py, setup.py, checkpoint.py, metrics.py, tiny.py: its parts
    configs/       presets: quickstart_cpu, toy_learning, household_gpu_vllm, search_gpu_vllm

Nothing heavy is imported here: torch and transformers load when a trainer is built.
"""
