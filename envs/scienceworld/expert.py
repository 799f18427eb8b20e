"""A fair ScienceWorld expert for the classification tasks (4-1..4-4: find a living thing, a non-living
thing, a plant, an animal): it reads the task, the rooms it looks at and the admissible actions, never the
simulator's gold path.

The oracle (`ScienceWorldEnv.oracle_action`) replays the simulator's gold action sequence, which walks
straight to the room holding the answer. `ClassifyExpert` knows what a reader of the task knows (eggs and
named animals are animals, what grows in a flower pot is a plant, both are alive, furniture is not) and
nothing of where things are: it looks around, teleports (the `teleportAction` simplification, in the
preset's `easy` set) to each room the admissible actions name until a room's listing shows a thing of
the asked kind, focuses on it, picks it up (a plant: its flower pot), teleports to the room the task
names and moves it into the box of the named colour.

    expert = ClassifyExpert()
    expert.observe(first_observation)            # then observe(obs) after every step
    action = expert.act(admissible_actions)      # None: another task, or nothing found (no path)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

TASKS = ("find-living-thing", "find-non-living-thing", "find-plant", "find-animal")
_TASK = re.compile(r"Your task is to find a\(n\) (living thing|non-living thing|plant|animal)\. First, focus on the "
                   r"thing\. Then, move it to the (\w+) box in the ([\w ]+?)\.")
_ROOM = re.compile(r"(?:This room is called the|This outside location is called the) ([\w ]+?)\.")
_ITEM = re.compile(r"^\t(?:a|an|the) (.+?)\s*$", re.M)
_POT = re.compile(r"^(flower pot \d+) \(containing (?:a|an) ([\w ]+?) in the \w+ stage")
ANIMALS = ("ant", "bee", "beaver", "blue jay", "brown bear", "butterfly", "chameleon", "chipmunk", "crocodile",
           "dove", "dragonfly", "elephant", "frog", "giant tortoise", "hedgehog", "moth", "mouse", "parrot",
           "rabbit", "toad", "turtle", "wolf")
# things a listing shows that are neither what a non-living search should move nor anything to take
_FIXED = ("agent", "air", "door", "box", "ground", "wall", "floor", "fountain", "sink", "toilet", "bathtub")


def animal_of(item: str) -> str | None:
    """ "blue jay egg" -> "blue jay"; "frog" -> "frog"; not an animal -> None."""
    name = item[:-4] if item.endswith(" egg") else item
    return name if name in ANIMALS else None


@dataclass
class ClassifyExpert:
    """Scripted explorer for the four classification tasks (see the module docstring)."""

    kind: str = ""          # living thing | non-living thing | plant | animal
    color: str = ""
    target_room: str = ""
    room: str = ""
    looked: bool = False    # the current room's listing has been read
    visited: list[str] = field(default_factory=list)
    found: tuple[str, str] | None = None   # (name to focus on, name to pick up)
    candidates: list[tuple[str, str]] = field(default_factory=list)  # of the asked kind, in the room looked at
    focused: bool = False
    focus_object: str = ""   # what the focus action named: "adult cherry tree"
    held: str = ""           # what was picked up
    holding: bool = False

    def observe(self, observation: str) -> None:
        task = _TASK.search(observation)
        if task:  # a new episode
            self.__init__()  # type: ignore[misc]
            self.kind, self.color, self.target_room = task.groups()
        room = _ROOM.search(observation)
        if room:
            self.room, self.looked = room.group(1), True
            if self.room not in self.visited:
                self.visited.append(self.room)
            if self.found is None:
                self.candidates = self._pick(observation)
                self.found = self.candidates[0] if self.candidates else None
        elif observation.startswith("You teleport to the "):
            self.room, self.looked = observation[len("You teleport to the "):].rstrip(". \n"), False
        if observation.startswith("You focus on"):
            self.focused = True
        if observation.startswith("You move") and "to the inventory" in observation:
            self.holding = True

    def _pick(self, listing: str) -> list[tuple[str, str]]:
        """(what to focus on, what to pick up) of each listed thing of the asked kind."""
        found = []
        for item in _ITEM.findall(listing.split("You also see:", 1)[0]):
            pot = _POT.match(item)
            animal = animal_of(item)
            plain = item.split(" (", 1)[0].split(".", 1)[0].split(",", 1)[0]
            if pot and self.kind in ("plant", "living thing"):
                found.append((pot.group(2), pot.group(1)))
            elif animal and self.kind in ("animal", "living thing"):
                found.append((animal, animal))
            elif (self.kind == "non-living thing" and not animal and not pot and "substance" not in plain
                    and not any(w in plain.split() for w in _FIXED) and self.room == self.target_room):
                found.append((plain, plain))
        return found

    def act(self, admissible: list[str]) -> str | None:
        if not self.kind:
            return None
        acts = admissible
        if self.found is None and not self.looked:
            return "look around"
        if self.found is None:
            # non-living things are everywhere: look in the target room first; else the next unseen room
            rooms = [a[len("teleport to "):] for a in acts if a.startswith("teleport to ")]
            order = ([self.target_room] if self.kind == "non-living thing" else []) + rooms
            nxt = next((r for r in order if r not in self.visited and f"teleport to {r}" in acts), None)
            return f"teleport to {nxt}" if nxt else None
        if not self.focused:  # "focus on adult cherry tree": the simulator names the stage first
            for focus_name, take_name in self.candidates:
                focus = _first(acts, lambda a: a.startswith("focus on ") and a.endswith(focus_name))
                if focus:
                    self.found, self.focus_object = (focus_name, take_name), focus[len("focus on "):]
                    return focus
            return None
        focus_name, take_name = self.found
        if self.kind == "non-living thing":
            return _first(acts, lambda a: a.startswith(f"move {take_name} ") and a.endswith(f"to {self.color} box"))
        if not self.holding:
            # the focused thing itself: a policy that copies the name it focused on cannot take the wrong pot
            # (a warm start cloned from pot pick-ups took the low-numbered pots whatever they held); the pot
            # only where the simulator does not list the thing alone
            self.held = next((n for n in (self.focus_object, take_name) if f"pick up {n}" in acts), "")
            return f"pick up {self.held}" if self.held else None
        if self.room != self.target_room:
            return f"teleport to {self.target_room}" if f"teleport to {self.target_room}" in acts else None
        return _first(acts, lambda a: _moves(a, self.held, self.color))


def _moves(action: str, name: str, color: str) -> bool:
    """Does `action` move the held `name` into the box? Held, "flower pot 4" is listed as "flower pot" and a
    plant picked up as "apple tree" as "adult apple tree" (its stage); "apple" (the fruit) is another thing."""
    end = f" to {color} box"
    if not action.startswith("move ") or not action.endswith(end):
        return False
    thing = action[len("move "):-len(end)].split(" containing ")[0].removesuffix(" in inventory")
    unnumbered, _, number = name.rpartition(" ")
    return name == thing or thing.endswith(" " + name) or (number.isdigit() and thing == unnumbered)


def _first(acts: list[str], test) -> str | None:
    return next((a for a in acts if test(a)), None)
