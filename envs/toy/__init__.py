"""Toy envs small enough for fast tests and CPU learning tests."""
from agentgym.horizon import ContextDefaults, turn_limit
from agentgym.registration import register

SHORT = ContextDefaults(layout="trajectory", max_context_tokens=8192, max_observation_tokens=512)
# the learning runs' budgets, above the gold-path limits (agentgym/gold_paths.json): room for a random policy's detours
LEARNING = "the learning runs' budget"


def register_envs() -> None:
    register("agentgym/Toy-KeyDoor-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=turn_limit("agentgym/Toy-KeyDoor-v0", 10, LEARNING),
             suites=("toy",), context=SHORT)
    register("agentgym/Toy-KeyDoor-Long-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=turn_limit("agentgym/Toy-KeyDoor-Long-v0", 16, LEARNING),
             kwargs={"length": 6}, suites=("toy",), context=SHORT)
    register("agentgym/Toy-Calculator-v0", "agentgym.envs.toy.calculator:CalculatorEnv", max_turns=turn_limit("agentgym/Toy-Calculator-v0", 4, LEARNING),
             suites=("toy",), context=SHORT)
    # the CPU learning runs' env (train/configs/toy_learning.yaml); not in the toy suite
    register("agentgym/Toy-KeyDoor-OneWord-v0", "agentgym.envs.toy.oneword:OneWordKeyDoor", max_turns=turn_limit("agentgym/Toy-KeyDoor-OneWord-v0", 8, LEARNING),
             context=SHORT)
