"""Household: an ALFWorld-style procedural text world (six task types, splits, an oracle planner)."""
from agentgym.horizon import ContextDefaults
from agentgym.registration import register

ENTRY = "agentgym.envs.household.env:HouseholdEnv"
MAX_TURNS = 50  # ALFWorld's usual budget
# ~100 tokens a turn (bytes, the worst case): 50 turns and the room's description fit in 8k
CONTEXT = ContextDefaults(layout="trajectory", max_context_tokens=8192, max_observation_tokens=1024)


def register_envs() -> None:
    from agentgym.envs.household.catalog import TASK_SHORT

    register("agentgym/Household-v0", ENTRY, max_turns=MAX_TURNS, context=CONTEXT)
    for task_type, short in TASK_SHORT.items():
        register(f"agentgym/Household-{short}-v0", ENTRY, max_turns=MAX_TURNS, kwargs={"task_types": (task_type,)},
                 suites=("household",), context=CONTEXT)
