"""Key-and-door corridor: walk to the key, take it, walk to the door, open it.

The right action depends on the observation (is the key here? is the door here? do I hold the key?)
and takes several turns, and the same rooms are seen again and again across rollouts of one task, so
GiGPO's anchor-state groups are non-trivial. Four commands; anything else is an invalid action.
"""
from __future__ import annotations

from typing import Any


from agentgym.core import TextEnv, make_info
from agentgym.tools import extract_tag

COMMANDS = ("left", "right", "take key", "open door")


class KeyDoorEnv(TextEnv):
    snapshot_fields = ("pos", "key_pos", "door_pos", "has_key", "done", "task_id")

    def __init__(self, length: int = 4, step_penalty: float = 0.0, key_bonus: float = 0.0):
        if length < 2:
            raise ValueError(f"length must be >= 2, got {length}")
        self.length = length
        self.step_penalty = step_penalty
        self.key_bonus = key_bonus
        # a step earns the key bonus or the door's 1.0 (or nothing), less the step penalty
        self.reward_range = (min(0.0, key_bonus) - step_penalty, max(1.0, key_bonus) - step_penalty)
        self.pos = self.key_pos = self.door_pos = 0
        self.has_key = self.done = False
        self.task_id = ""

    @property
    def instructions(self) -> str:
        return ("You are in a corridor of rooms. Find the key, take it, then open the door. "
                f"Reply with exactly one command: {', '.join(COMMANDS)}.")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        rng = self.np_random  # seeded by reset(seed); an unseeded reset continues that stream (Gymnasium's rule)
        self.door_pos = int(rng.integers(0, 2)) * (self.length - 1)  # door at one end
        start = self.length - 1 - self.door_pos if self.length > 2 else self.door_pos
        self.key_pos = int(rng.choice([p for p in range(self.length) if p != self.door_pos]))
        self.pos, self.has_key, self.done = start, False, False
        self.task_id = f"keydoor-{self.length}-k{self.key_pos}-d{self.door_pos}-s{start}"
        obs = self._describe()
        return obs, self._info(obs, valid=True)

    def _describe(self) -> str:
        parts = [f"You are in room {self.pos}."]
        if self.pos == self.key_pos and not self.has_key:
            parts.append("There is a key here.")
        if self.pos == self.door_pos:
            parts.append("There is a locked door here.")
        parts.append("You hold the key." if self.has_key else "Your hands are empty.")
        return " ".join(parts)

    def _info(self, obs: str, valid: bool, components: dict[str, float] | None = None) -> dict[str, Any]:
        return make_info(success=self.done, valid_action=valid, anchor=self._describe(), reward_components=components,
                         admissible_actions=self._admissible(), task_id=self.task_id)

    def _admissible(self) -> list[str]:
        moves = [m for m, d in (("left", -1), ("right", 1)) if 0 <= self.pos + d < self.length]
        if self.pos == self.key_pos and not self.has_key:
            moves.append("take key")
        if self.pos == self.door_pos:
            moves.append("open door")
        return moves

    def oracle_action(self) -> str:
        target = self.door_pos if self.has_key else self.key_pos
        if self.pos == target:
            return "open door" if self.has_key else "take key"
        return "right" if target > self.pos else "left"

    def step(self, action: str):
        command = (extract_tag(action, "action") or action).strip().lower().rstrip(".")[:64]
        components = {"step": -self.step_penalty} if self.step_penalty else {}
        valid = command in self._admissible()
        if command not in COMMANDS:
            obs = f"Unknown command {command[:40]!r}. Reply with one of: {', '.join(COMMANDS)}. " + self._describe()
        elif not valid:
            obs = f"You cannot {command} here. " + self._describe()
        elif command in ("left", "right"):
            self.pos += 1 if command == "right" else -1
            obs = self._describe()
        elif command == "take key":
            self.has_key = True
            if self.key_bonus:
                components["key"] = self.key_bonus
            obs = "You take the key. " + self._describe()
        elif self.has_key:
            self.done = True
            components["outcome"] = 1.0
            obs = "You unlock the door and step through. You win!"
        else:
            valid = False
            obs = "The door is locked and you have no key. " + self._describe()
        self._last_obs = obs
        reward = float(sum(components.values()))
        return obs, reward, self.done, False, self._info(obs, valid, components)

    def render(self) -> str:
        cells = ["D" if i == self.door_pos else ("k" if i == self.key_pos and not self.has_key else ".")
                 for i in range(self.length)]
        cells[self.pos] = "@"
        return "".join(cells) + (" (key)" if self.has_key else "")
