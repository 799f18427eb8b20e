"""Household: an ALFWorld-style procedural text world (six task types, splits, an oracle planner)."""
from agentgym.registration import register

ENTRY = "agentgym.envs.household.env:HouseholdEnv"
MAX_TURNS = 50  # ALFWorld's usual budget


def register_envs() -> None:
    from agentgym.envs.household.catalog import TASK_SHORT

    register("agentgym/Household-v0", ENTRY, max_turns=MAX_TURNS)
    for task_type, short in TASK_SHORT.items():
        register(f"agentgym/Household-{short}-v0", ENTRY, max_turns=MAX_TURNS, kwargs={"task_types": (task_type,)},
                 suites=("household",))
