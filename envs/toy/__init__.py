"""Toy envs small enough for fast tests and CPU learning tests."""
from agentgym.horizon import ContextDefaults
from agentgym.registration import register

SHORT = ContextDefaults(layout="trajectory", max_context_tokens=8192, max_observation_tokens=512)


def register_envs() -> None:
    register("agentgym/Toy-KeyDoor-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=10, suites=("toy",),
             context=SHORT)
    register("agentgym/Toy-KeyDoor-Long-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=16,
             kwargs={"length": 6}, suites=("toy",), context=SHORT)
    register("agentgym/Toy-Calculator-v0", "agentgym.envs.toy.calculator:CalculatorEnv", max_turns=4,
             suites=("toy",), context=SHORT)
    # the CPU learning runs' env (train/configs/toy_learning.yaml); not in the toy suite
    register("agentgym/Toy-KeyDoor-OneWord-v0", "agentgym.envs.toy.oneword:OneWordKeyDoor", max_turns=8,
             context=SHORT)
