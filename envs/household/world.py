"""The state of one household world and its procedural generator.

State is a handful of flat lists indexed by receptacle or object number, so a step touches a few
list cells and copying a world (for the oracle's look-ahead) is cheap. Generation draws everything
from one `random.Random` seeded by (split, seed), so the same seed and knobs give the same world.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass

from agentgym.envs.household import catalog as cat
from agentgym.errors import ConfigError

NOWHERE = -1  # the agent's location before its first "go to": the middle of the room
DIFFICULTY = {"easy": (0.5, 3), "medium": (1.0, 8), "hard": (1.6, 16)}  # (receptacle_scale, distractors)


@dataclass(frozen=True)
class Task:
    """What to achieve: task type, the object and receptacle types, and the goal sentence."""

    task_type: str
    room: str
    obj_type: str
    recep_type: str  # "desklamp" for look-at-in-light
    goal: str
    split: str
    seed: int

    @property
    def task_id(self) -> str:
        return f"household/{self.split}/{self.task_type}/{self.room}/{self.obj_type}/{self.recep_type}/{self.seed}"


@dataclass(frozen=True)
class Knobs:
    """Difficulty knobs: receptacle count scale, distractor objects, allowed task types and rooms."""

    receptacle_scale: float = 1.0
    distractors: int = 8
    task_types: tuple[str, ...] = cat.TASK_TYPES
    rooms: tuple[str, ...] = tuple(cat.ROOMS)

    def __post_init__(self) -> None:
        bad = [t for t in self.task_types if t not in cat.TASK_TYPES]
        if bad or not self.task_types:
            raise ConfigError(f"unknown task types {bad}; choose from {', '.join(cat.TASK_TYPES)}")
        bad_rooms = [r for r in self.rooms if r not in cat.ROOMS]
        if bad_rooms or not self.rooms:
            raise ConfigError(f"unknown rooms {bad_rooms}; choose from {', '.join(cat.ROOMS)}")
        if not 0.1 <= self.receptacle_scale <= 5:
            raise ConfigError(f"receptacle_scale must be in [0.1, 5], got {self.receptacle_scale}")
        if not 0 <= self.distractors <= 200:
            raise ConfigError(f"distractors must be in [0, 200], got {self.distractors}")


class World:
    """Receptacles, objects, the agent and the task. Mutated in place by `engine.execute`."""

    def __init__(self, task: Task, recep_types: list[str], obj_types: list[str]):
        self.task = task
        self.rtype = recep_types
        self.rname = _number(recep_types)
        self.openable = [t in cat.OPENABLE for t in recep_types]
        self.is_open = [False] * len(recep_types)
        self.contents: list[list[int]] = [[] for _ in recep_types]
        self.otype = obj_types
        self.oname = _number(obj_types)
        self.oloc = [NOWHERE] * len(obj_types)  # receptacle index; NOWHERE while carried
        self.hot = [False] * len(obj_types)
        self.cool = [False] * len(obj_types)
        self.clean = [False] * len(obj_types)
        self.lamp = next((i for i, t in enumerate(obj_types) if t == cat.LAMP), NOWHERE)
        self.lamp_on = False
        self.loc = NOWHERE
        self.holding = NOWHERE
        self.names = {n: ("r", i) for i, n in enumerate(self.rname)} | {n: ("o", i) for i, n in enumerate(self.oname)}
        self.targets = [i for i, t in enumerate(recep_types) if t == task.recep_type]

    def place(self, obj: int, recep: int) -> None:
        self.oloc[obj] = recep
        self.contents[recep].append(obj)

    def copy(self) -> "World":
        """A deep copy of the mutable state (the static tables are shared)."""
        new = copy.copy(self)
        new.is_open = list(self.is_open)
        new.contents = [list(c) for c in self.contents]
        new.oloc, new.hot, new.cool, new.clean = list(self.oloc), list(self.hot), list(self.cool), list(self.clean)
        return new

    def visible(self, recep: int) -> bool:
        return not self.openable[recep] or self.is_open[recep]

    def state_key(self) -> str:
        """A canonical key of everything that can change: equal keys mean equal states."""
        flags = "".join("1" if o else "0" for o in self.is_open)
        objs = ",".join(f"{loc}{'h' if h else ''}{'c' if c else ''}{'w' if w else ''}"
                        for loc, h, c, w in zip(self.oloc, self.hot, self.cool, self.clean))
        return f"{self.task.task_id}|at{self.loc}|hold{self.holding}|open{flags}|lamp{int(self.lamp_on)}|{objs}"


def _number(types: list[str]) -> list[str]:
    counts: dict[str, int] = {}
    names = []
    for t in types:
        counts[t] = counts.get(t, 0) + 1
        names.append(f"{t} {counts[t]}")
    return names


def knobs_for(difficulty: str | None, **overrides) -> Knobs:
    """Knobs from a difficulty preset ("easy", "medium", "hard") with explicit values on top."""
    if difficulty is not None and difficulty not in DIFFICULTY:
        raise ConfigError(f"unknown difficulty {difficulty!r}; choose from {', '.join(DIFFICULTY)}")
    scale, distractors = DIFFICULTY[difficulty or "medium"]
    values = {"receptacle_scale": scale, "distractors": distractors}
    values.update({k: v for k, v in overrides.items() if v is not None})
    if isinstance(values.get("task_types"), str):
        values["task_types"] = (values["task_types"],)
    if isinstance(values.get("rooms"), str):
        values["rooms"] = (values["rooms"],)
    values["task_types"] = tuple(values.get("task_types", cat.TASK_TYPES))
    values["rooms"] = tuple(values.get("rooms", tuple(cat.ROOMS)))
    return Knobs(**values)


def choose_task(seed: int, split: str, knobs: Knobs) -> tuple[str, str, str, str]:
    """(task type, room, object type, receptacle type) allowed by the split and knobs."""
    options = [(t, r) for t in knobs.task_types for r in knobs.rooms if cat.split_combinations(r, t, split)]
    if not options:
        raise ConfigError(f"no {split} task fits task_types={knobs.task_types} and rooms={knobs.rooms}; "
                          "allow more rooms or task types")
    rng = random.Random(f"household-task:{split}:{seed}")
    task_type = rng.choice(sorted({t for t, _ in options}))
    room = rng.choice([r for t, r in options if t == task_type])
    obj, recep = rng.choice(cat.split_combinations(room, task_type, split))
    return task_type, room, obj, recep


def generate(seed: int, split: str = "train", knobs: Knobs = Knobs(),
             combo: tuple[str, str, str, str] | None = None) -> World:
    """The world of one seed: same (seed, split, knobs) -> same world and task.

    The world is drawn from (split, seed, combo, scale, distractors) only, so a task id (which names the
    combo) rebuilds the same world whatever `task_types`/`rooms` the env was made with."""
    if split not in cat.SPLITS:
        raise ConfigError(f"unknown split {split!r}; choose from {', '.join(cat.SPLITS)}")
    task_type, room, obj, recep = combo or choose_task(seed, split, knobs)
    if (obj, recep) not in cat.split_combinations(room, task_type, split):
        raise ConfigError(f"{task_type} with {obj} and {recep} in a {room} is not a {split} task")
    rng = random.Random(f"household:{split}:{seed}:{task_type}:{room}:{obj}:{recep}")
    task = Task(task_type, room, obj, recep, rng.choice(cat.GOALS[task_type]).format(o=obj, r=recep), split, seed)
    receps = _receptacles(rng, task, knobs.receptacle_scale)
    lamp_host = _lamp_host(rng, task.room, receps)
    n_targets = 2 if task.task_type == "pick_two_obj_and_place" else 1
    n_targets += rng.randint(0, 1)  # sometimes a spare instance, as in ALFWorld
    pool = [o for o in cat.ROOM_OBJECTS[task.room] if o != task.obj_type]
    objs = [task.obj_type] * n_targets + [rng.choice(pool) for _ in range(knobs.distractors)]
    rng.shuffle(objs)  # so the target is not always "apple 1"
    if lamp_host is not None:
        objs.append(cat.LAMP)
    world = World(task, receps, objs)
    avoid = set(world.targets)  # the goal must not hold at the start
    spots = [i for i in range(len(receps)) if i not in avoid]
    for j, t in enumerate(objs):
        if t == cat.LAMP:
            world.place(j, lamp_host)
        else:
            world.place(j, rng.choice(spots if t == task.obj_type else range(len(receps))))
    return world


def _receptacles(rng: random.Random, task: Task, scale: float) -> list[str]:
    types = []
    for rtype, (lo, hi) in cat.ROOMS[task.room].items():
        top = max(lo, round(hi * scale))
        count = rng.randint(lo, top)
        needed = rtype == task.recep_type or rtype == cat.APPLIANCE.get(task.task_type, ("",))[0]
        if needed and count == 0:
            count = 1
        types += [rtype] * count
    if task.recep_type != cat.LAMP and len(types) == types.count(task.recep_type):
        types.append("countertop" if task.recep_type != "countertop" else "shelf")  # somewhere else to start
    return types


def _lamp_host(rng: random.Random, room: str, receps: list[str]) -> int | None:
    hosts = [i for i, t in enumerate(receps) if t in cat.LAMP_HOSTS.get(room, ())]
    return rng.choice(hosts) if hosts else None
