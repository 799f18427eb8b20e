"""A fair household expert: it acts on what the agent sees, never on the hidden world.

The oracle (oracle.py) reads the whole world, so its first move goes straight to the object and its
demonstrations never show searching; a model cloned from it has never seen how to look for things.
`FairExpert` reads only the observations (the task sentence, the room listing, what each receptacle
shows when visited or opened, what its own actions did) and the admissible commands, and does what a
careful person would: visit receptacles in the order the room lists them, open closed ones, take the
object when it appears, transform it with the appliance if the task asks, and put it in the target.

    expert = FairExpert()
    expert.observe(first_observation)            # then observe(obs) after every step
    command = expert.act(info["admissible_actions"])
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from agentgym.envs.household import catalog as cat

_TASK = re.compile(r"Your task is to: (.+?)\s*$", re.M)
_INTRO = re.compile(r"Looking quickly around you, you see (.+?)\.\s*$", re.M)
_ARRIVE = re.compile(r"You arrive at (\w+ \d+)\.")
_SEE = re.compile(r"(?:On the (\w+ \d+), you see|The (\w+ \d+) is open\. In it, you see) (.+?)\.(?:\s|$)")
_TAKE = re.compile(r"You pick up the (\w+ \d+) from the (\w+ \d+)\.")
_PUT = re.compile(r"You put the (\w+ \d+) in/on the (\w+ \d+)\.")
_TRANSFORM = re.compile(r"You (?:heat|cool|clean) the (\w+ \d+) using the (\w+ \d+)\.")
_NAME = re.compile(r"(\w+) \d+")


def kind(name: str) -> str:
    """The type of a numbered name: 'apple 2' -> 'apple'."""
    return name.rsplit(" ", 1)[0]


def parse_listing(text: str) -> list[str]:
    """ "a apple 1, a mug 2, and a knife 1" -> ["apple 1", "mug 2", "knife 1"] ("nothing" -> [])."""
    return [m.group(0) for m in _NAME.finditer(text)]


def parse_goal(goal: str) -> tuple[str, str, str] | None:
    """(task type, object type, receptacle type or "") of a goal sentence, from catalog.GOALS."""
    for task_type, templates in cat.GOALS.items():
        for template in templates:
            pattern = re.escape(template).replace(r"\{o\}", r"(?P<o>\w+)").replace(r"\{r\}", r"(?P<r>\w+)")
            m = re.fullmatch(pattern, goal.strip())
            if m:
                return task_type, m.group("o"), m.groupdict().get("r") or ""
    return None


@dataclass
class FairExpert:
    """Scripted searcher over observations and admissible commands (see the module docstring)."""

    task_type: str = ""
    want: str = ""                       # object type the task needs
    target: str = ""                     # receptacle type to fill ("" for look-at-in-light)
    order: list[str] = field(default_factory=list)       # receptacles as the room lists them
    seen: dict[str, list[str]] = field(default_factory=dict)  # receptacle -> objects last seen there
    at: str = ""
    holding: str = ""
    transformed: set[str] = field(default_factory=set)
    placed: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------ reading observations
    def observe(self, observation: str) -> None:
        task = _TASK.search(observation)
        if task:  # a new episode
            self.__init__()
            goal = parse_goal(task.group(1))
            if goal:
                self.task_type, self.want, self.target = goal
            intro = _INTRO.search(observation)
            self.order = parse_listing(intro.group(1)) if intro else []
            return
        arrive = _ARRIVE.search(observation)
        if arrive:
            self.at = arrive.group(1)
        for m in _SEE.finditer(observation):
            self.seen[m.group(1) or m.group(2)] = parse_listing(m.group(3))
        take = _TAKE.search(observation)
        if take:
            self.holding = take.group(1)
            there = self.seen.get(take.group(2), [])
            if take.group(1) in there:
                there.remove(take.group(1))
        put = _PUT.search(observation)
        if put:
            self.holding = ""
            self.seen.setdefault(put.group(2), []).append(put.group(1))
            if kind(put.group(2)) == self.target:
                self.placed.add(put.group(1))
        transform = _TRANSFORM.search(observation)
        if transform:
            self.transformed.add(transform.group(1))

    # ------------------------------------------------------------------ choosing a command
    def act(self, admissible: list[str]) -> str:
        acts = list(admissible)
        if not self.want:
            return "look"
        if self.holding and kind(self.holding) != self.want:  # not ours: put it back where we stand
            return _first(acts, lambda a: a.startswith(f"put {self.holding} in/on ")) or "look"
        if self.holding:
            return self._deliver(acts)
        return self._search(acts)

    def _deliver(self, acts: list[str]) -> str:
        h, need = self.holding, cat.needs(self.task_type)
        if need in ("heat", "cool", "clean") and h not in self.transformed:
            appliance, verb = cat.APPLIANCE[self.task_type]
            return (_first(acts, lambda a: a.startswith(f"{verb} {h} with ")) or self._open_here(acts)
                    or self._go_to_kind(acts, appliance))
        if self.task_type == "look_at_obj_in_light":
            lamp = [r for r, objs in self.seen.items() if any(kind(o) == cat.LAMP for o in objs)]
            return (_first(acts, lambda a: a.startswith(f"use {cat.LAMP}")) or
                    (self._go(acts, lamp[0]) if lamp else None) or self._explore(acts))
        return (_first(acts, lambda a: a.startswith(f"put {h} in/on {self.target} ")) or self._open_here(acts)
                or self._go_to_kind(acts, self.target, prefer=self.at))

    def _search(self, acts: list[str]) -> str:
        def wanted(obj: str, where: str) -> bool:
            already = obj in self.placed or (self.task_type == "pick_two_obj_and_place" and kind(where) == self.target)
            return kind(obj) == self.want and not already

        take = _first(acts, lambda a: (m := re.fullmatch(r"take (\w+ \d+) from (\w+ \d+)", a)) is not None
                      and wanted(m.group(1), m.group(2)))
        if take:
            return take
        known = [r for r in self.order if any(wanted(o, r) for o in self.seen.get(r, ()))]
        if known and known[0] != self.at:
            return self._go(acts, known[0]) or self._explore(acts)
        return self._explore(acts)

    def _explore(self, acts: list[str]) -> str:
        """Open where we stand if we have not seen inside, else go to the next receptacle not yet seen."""
        if self.at and self.at not in self.seen:
            opened = self._open_here(acts)
            if opened:
                return opened
        for r in self.order:
            if r not in self.seen and r != self.at:
                go = self._go(acts, r)
                if go:
                    return go
        return "look"  # everything seen and nothing found: the task cannot be done from what we know

    def _open_here(self, acts: list[str]) -> str | None:
        return _first(acts, lambda a: a == f"open {self.at}") if self.at else None

    def _go(self, acts: list[str], receptacle: str) -> str | None:
        return _first(acts, lambda a: a == f"go to {receptacle}")

    def _go_to_kind(self, acts: list[str], rtype: str, prefer: str = "") -> str:
        if prefer and kind(prefer) == rtype:
            return _first(acts, lambda a: a == f"open {prefer}") or "look"
        for r in self.order:
            if kind(r) == rtype:
                go = self._go(acts, r)
                if go:
                    return go
        return self._explore(acts)


def _first(acts: list[str], test) -> str | None:
    return next((a for a in acts if test(a)), None)
