"""Household: an ALFWorld-style procedural text world (six task types, splits, an oracle planner)."""
from agentgym.horizon import ContextDefaults, turn_limit
from agentgym.registration import register

ENTRY = "agentgym.envs.household.env:HouseholdEnv"
MAX_TURNS = 50  # ALFWorld's usual budget, above every task type's gold-path limit (agentgym/gold_paths.json)
ALFWORLD = "ALFWorld's budget"
# ~100 tokens a turn (bytes, the worst case): 50 turns and the room's description fit in 8k
CONTEXT = ContextDefaults(layout="trajectory", max_context_tokens=8192, max_observation_tokens=1024)


def register_envs() -> None:
    from agentgym.envs.household.catalog import TASK_SHORT

    register("agentgym/Household-v0", ENTRY, max_turns=turn_limit("agentgym/Household-v0", MAX_TURNS, ALFWORLD),
             context=CONTEXT)
    for task_type, short in TASK_SHORT.items():
        env_id = f"agentgym/Household-{short}-v0"
        register(env_id, ENTRY, max_turns=turn_limit(env_id, MAX_TURNS, ALFWORLD), kwargs={"task_types": (task_type,)},
                 suites=("household",), context=CONTEXT)
