"""The rollout engine: plays envs with policies and lays the episodes out for training.

It sits on the env contract (the top-level modules of `agentgym`: core, spaces, policy, trajectory, chat,
toolcalls, registration, snapshot, ...), which imports nothing from here; `tests/test_architecture.py` holds
that arrow. rollout (the turn loop), rollout_config (`RolloutConfig`), vector (env pools), layouts and
folding (how turns become samples), branching and lookahead (episodes grown from env snapshots),
multiagent (seats), budget_check (does a rollout fit the context).
"""
