"""Supervised warm start (`agentgym sft`): behaviour cloning of an expert, an eval's episodes or transcripts.

    data.py    demonstrations -> training samples (expert rollouts, trajectories, chat transcripts)
    run.py     `sft(config)`: the training loop, its checkpoint and the RL warm start (`with_sft_start`)
    cli.py     the `agentgym sft` command

Its section (`sft:`) is train/sft_section.py: this stage runs a whole TrainConfig, so sft/ stands above
train/config.py, which imports nothing of it.
"""
