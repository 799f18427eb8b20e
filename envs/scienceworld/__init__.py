"""ScienceWorld: the 30 tasks of the ScienceWorld benchmark over its JVM simulator (needs the
`scienceworld` extra and a Java runtime to be made; registering needs neither)."""
from agentgym.horizon import ContextDefaults
from agentgym.registration import register
from agentgym.envs.scienceworld.tasks import TASKS, env_id

ENTRY = "agentgym.envs.scienceworld.env:ScienceWorldEnv"


def register_envs() -> None:
    for task in TASKS:
        # 30-120 turns of ~130 tokens outgrow any fixed context: fold (the env summarises room and inventory)
        context = ContextDefaults(horizon=task.max_turns, layout="fold", max_context_tokens=8192,
                                  max_observation_tokens=2048)
        register(env_id(task.name), ENTRY, max_turns=task.max_turns, kwargs={"task": task.name},
                 suites=("scienceworld",), context=context)
