"""Envs beyond one process: any registered env served over HTTP (`agentgym serve env ID`, server.py and
service.py) and played from anywhere through the same contract (`agentgym/Remote-v0`, `remote:URL/ID`)."""
from agentgym.registration import register


def register_envs() -> None:
    # no max_turns here: the served env's own limit applies on the server (RemoteEnv.max_turns reports it)
    register("agentgym/Remote-v0", "agentgym.envs.remote.client:RemoteEnv")
