"""Training: advantage estimators, losses, config and the trainer (`agentgym train`)."""
