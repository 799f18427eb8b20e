"""ScienceWorld: the 30 tasks of the ScienceWorld benchmark over its JVM simulator (needs the
`scienceworld` extra and a Java runtime to be made; registering needs neither)."""
from agentgym.horizon import ContextDefaults, declare_random_outcome, turn_limit
from agentgym.registration import register
from agentgym.envs.scienceworld.tasks import EXPERIMENT_CAP, RANDOM_OUTCOME, TASKS, env_id

ENTRY = "agentgym.envs.scienceworld.env:ScienceWorldEnv"
# the gold path knows where everything is; an agent looks: no task gets fewer turns than this
EXPLORE_FLOOR = 100


def register_envs() -> None:
    for task in TASKS:
        name = env_id(task.name)
        if task.name in RANDOM_OUTCOME:  # the genetics experiments' length is random too: the simulator's cap on it
            declare_random_outcome(name, RANDOM_OUTCOME[task.name])
            limit = turn_limit(name, EXPERIMENT_CAP, "the gold experiment's longest: 10 watering cycles a generation")
        else:  # the longest gold path measured plus the margin (agentgym/gold_paths.json), at least the floor
            limit = turn_limit(name, EXPLORE_FLOOR, "ScienceWorld's floor: room to explore")
        # 15-390 turns of ~130 tokens outgrow any fixed context: fold (the env summarises room and inventory)
        context = ContextDefaults(horizon=limit, layout="fold", max_context_tokens=8192, max_observation_tokens=2048)
        register(name, ENTRY, max_turns=limit, kwargs={"task": task.name}, suites=("scienceworld",),
                 context=context)
