"""Real trajectories without the rollout engine: step a registered env with a chosen action per turn.

Report and metric tests use these so they exercise real env text (observations, components, invalid
actions) while staying independent of the policy and rollout code.
"""
from __future__ import annotations

import time
from typing import Callable

import agentgym
from agentgym.trajectory import Trajectory, Turn


def play(env_id: str, seed: int, choose: Callable[[object, str, dict], str], sample: int = 0,
         group_id: int = 0) -> Trajectory:
    """One episode of `env_id` where `choose(env, obs, info)` gives each action; token ids are fake."""
    env = agentgym.make(env_id)
    start = time.perf_counter()
    obs, info = env.reset(seed=seed)
    first, turns, success, end = obs, [], False, "max_turns"
    for index in range(100):
        action = choose(env, obs, info)
        next_obs, reward, terminated, truncated, info = env.step(action)
        ids = tuple(range(index * 10, index * 10 + 5))
        tools = [{"name": r.name, "arguments": r.arguments, "ok": r.ok, "output": r.output}
                 for r in info.get("tool_results", [])]
        turns.append(Turn(index=index, observation=obs, action=action, prompt_ids=ids, response_ids=(1, 2, 3),
                          logprobs=(-0.1, -0.2, -0.3), reward=reward,
                          reward_components=dict(info.get("reward_components", {})), anchor=info.get("anchor"),
                          valid=bool(info.get("valid_action", True)), terminated=terminated, truncated=truncated,
                          tool_calls=len(tools), tool_errors=sum(not t["ok"] for t in tools),
                          info={"tool_results": tools} if tools else {}))
        obs, success = next_obs, bool(info.get("success"))
        if terminated or truncated:
            end = "terminated" if terminated else "truncated"
            break
    env.close()
    return Trajectory(env_id=env_id, seed=seed, group_id=group_id, sample_index=sample, turns=tuple(turns),
                      success=success, end_reason=end, task_id=str(info.get("task_id", "")),
                      system_prompt=env.instructions, first_observation=first, wall_s=time.perf_counter() - start)


def oracle(env, obs, info) -> str:
    return env.oracle_action()


def always(text: str):
    return lambda env, obs, info: text


import pytest  # noqa: E402


@pytest.fixture
def episodes():
    """The helpers above, as a fixture (test modules here have no package to import from)."""
    import types

    return types.SimpleNamespace(play=play, oracle=oracle, always=always)
