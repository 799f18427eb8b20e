"""Toy envs small enough for fast tests and CPU learning tests."""
from agentgym.registration import register


def register_envs() -> None:
    register("agentgym/Toy-KeyDoor-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=10, suites=("toy",))
    register("agentgym/Toy-KeyDoor-Long-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=16,
             kwargs={"length": 6}, suites=("toy",))
    register("agentgym/Toy-Calculator-v0", "agentgym.envs.toy.calculator:CalculatorEnv", max_turns=4,
             suites=("toy",))
    # the CPU learning runs' env (train/configs/toy_learning.yaml); not in the toy suite
    register("agentgym/Toy-KeyDoor-OneWord-v0", "agentgym.envs.toy.oneword:OneWordKeyDoor", max_turns=8)
