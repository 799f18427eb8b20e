"""Toy envs small enough for fast tests and CPU learning tests."""
from agentgym.registration import register


def register_envs() -> None:
    register("agentgym/Toy-KeyDoor-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=10, suites=("toy",))
    register("agentgym/Toy-KeyDoor-Long-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=16,
             kwargs={"length": 6}, suites=("toy",))
    register("agentgym/Toy-Calculator-v0", "agentgym.envs.toy.calculator:CalculatorEnv", max_turns=4,
             suites=("toy",))
