"""Supervised warm start (`agentgym sft`): behaviour cloning of an expert, an eval's episodes or transcripts.

    config.py  the `sft:` section of a train config
    data.py    demonstrations -> training samples (expert rollouts, trajectories, chat transcripts)
    run.py     `sft(config)`: the training loop, its checkpoint and the RL warm start (`with_sft_start`)
    cli.py     the `agentgym sft` command

Nothing is imported here: train/config.py reads sft/config.py while the package loads.
"""
