"""One episode played by an env's fair expert (`env.unwrapped.expert_action()`), for the expert tests."""
from __future__ import annotations

from typing import Any, Callable


def play(env: Any, seed: int, options: dict[str, Any] | None = None, max_turns: int = 50,
         before_each_step: Callable[[Any], None] | None = None) -> tuple[bool, list[str]]:
    """(solved, the expert's actions); an expert with no path (None) ends the episode unsolved.
    `before_each_step(env.unwrapped)` runs before every action (e.g. to scramble hidden state)."""
    env.reset(seed=seed, options=options)
    actions: list[str] = []
    for _ in range(max_turns):
        if before_each_step:
            before_each_step(env.unwrapped)
        action = env.unwrapped.expert_action()
        if action is None:
            return False, actions
        actions.append(action)
        _, _, term, trunc, info = env.step(action)
        if term or trunc:
            return bool(info["success"]), actions
    return False, actions
