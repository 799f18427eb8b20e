"""ScienceWorld: the 30 tasks of the ScienceWorld benchmark over its JVM simulator (needs the
`scienceworld` extra and a Java runtime to be made; registering needs neither)."""
from agentgym.registration import register
from agentgym.envs.scienceworld.tasks import TASKS, env_id

ENTRY = "agentgym.envs.scienceworld.env:ScienceWorldEnv"


def register_envs() -> None:
    for task in TASKS:
        register(env_id(task.name), ENTRY, max_turns=task.max_turns, kwargs={"task": task.name},
                 suites=("scienceworld",))
