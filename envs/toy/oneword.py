"""`agentgym/Toy-KeyDoor-OneWord-v0`: the key-door corridor (length 3) where an action is its first word.

left, right, take (the key), open (the door); each observation says which way the door is, so a policy
that reads only the current observation can solve it. Rewards come only for taking the key (`key_bonus`)
and opening the door, several turns after the moves that made them possible. The CPU learning runs
(`model.policy: tiny:keydoor`, train/tiny.py) train a random tiny model on it.
"""
from __future__ import annotations

import re
from typing import Any

from agentgym.envs.toy.keydoor import KeyDoorEnv

_WORDS = {"take": "take key", "open": "open door", "left": "left", "right": "right"}


class OneWordKeyDoor(KeyDoorEnv):
    """Key-door where the first word of the action is the command (take -> take key, open -> open door)."""

    def __init__(self, length: int = 3, key_at_start: bool = False, **kwargs: Any):
        super().__init__(length=length, **kwargs)
        self.key_at_start = key_at_start

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        if self.key_at_start:  # the short variant: take the key where you stand, then find the door
            self.key_pos = self.pos
            obs = self._describe()
            info = self._info(obs, valid=True)
        return obs, info

    @property
    def instructions(self) -> str:
        return "Take the key, then open the door: left, right, take or open."

    def _describe(self) -> str:
        # a direction hint keeps the task solvable from the current observation alone (history_turns: 0)
        text = super()._describe()
        if self.pos != self.door_pos:
            text += " The door is to the " + ("left." if self.door_pos < self.pos else "right.")
        return text

    def step(self, action: str):
        words = re.findall(r"[a-z]+", action.lower()[:200])
        command = _WORDS.get(words[0], " ".join(words[:2])) if words else action
        return super().step(command)
