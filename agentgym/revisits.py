"""The revisit penalty household, TextWorld and ScienceWorld share: an accepted action that brings back a
state the episode has been in (look twice, walk back, repeat a move that moves nothing) costs `penalty`,
reward component `revisit`, so the loops a small model falls into are told apart from progress. Each env
says what a state is (its key); branching and lookahead read the component to find the loops."""
from __future__ import annotations

from agentgym.errors import ConfigError

REVISIT = "revisit"  # the reward component


def checked_penalty(value: float) -> float:
    """The penalty as a float; a negative one (a reward for looping) is refused with the fix."""
    penalty = float(value)
    if penalty < 0:
        raise ConfigError(f"revisit_penalty is subtracted, so it must be >= 0, got {value!r}")
    return penalty


def penalise_revisit(visited: set[str], key: str, penalty: float, components: dict[str, float]) -> None:
    """Charge `penalty` in `components` when `key` is in `visited`; record `key` either way."""
    if key in visited and penalty:
        components[REVISIT] = -penalty
    visited.add(key)
