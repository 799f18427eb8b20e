"""What a household world is made of: rooms, receptacle and object types, task types, goal sentences,
and which (room, task, object, receptacle) combinations belong to the unseen split.

Plain tables, in ALFWorld's vocabulary (lower-case one-word type names, numbered instances), so that
worlds read like ALFWorld's and names parse with a single split on the last space.
"""
from __future__ import annotations

import zlib
from functools import lru_cache

TASK_TYPES = ("pick_and_place", "look_at_obj_in_light", "pick_clean_then_place", "pick_heat_then_place",
              "pick_cool_then_place", "pick_two_obj_and_place")
# short names used in env ids (agentgym/Household-PickPlace-v0, ...)
TASK_SHORT = {"pick_and_place": "PickPlace", "look_at_obj_in_light": "Look", "pick_clean_then_place": "Clean",
              "pick_heat_then_place": "Heat", "pick_cool_then_place": "Cool", "pick_two_obj_and_place": "PickTwo"}
SPLITS = ("train", "test_seen", "test_unseen")
# The design's generic held-out name: `test` means the strictest held-out split, as in ALFWorld's
# "out of distribution" evaluation, so `agentgym eval --split test` works on every family.
SPLIT_ALIASES = {"test": "test_unseen"}


def canonical_split(split: str) -> str:
    return SPLIT_ALIASES.get(split, split)

OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
# the appliance each transforming task needs, and the verb the command uses
APPLIANCE = {"pick_clean_then_place": ("sinkbasin", "clean"), "pick_heat_then_place": ("microwave", "heat"),
             "pick_cool_then_place": ("fridge", "cool")}
LAMP = "desklamp"

# room -> receptacle type -> (min, max) count; the knob `receptacle_scale` multiplies the maxima
ROOMS: dict[str, dict[str, tuple[int, int]]] = {
    "kitchen": {"cabinet": (3, 8), "drawer": (2, 6), "countertop": (1, 3), "fridge": (1, 1),
                "microwave": (1, 1), "sinkbasin": (1, 1), "stoveburner": (2, 4), "diningtable": (1, 1),
                "shelf": (0, 3), "coffeemachine": (1, 1), "toaster": (1, 1), "garbagecan": (1, 1)},
    "livingroom": {"sofa": (1, 1), "armchair": (0, 2), "coffeetable": (1, 2), "sidetable": (1, 2),
                   "shelf": (1, 4), "drawer": (1, 4), "cabinet": (0, 3), "tvstand": (1, 1),
                   "garbagecan": (1, 1), "safe": (0, 1), "dresser": (0, 1)},
    "bedroom": {"bed": (1, 1), "desk": (1, 1), "sidetable": (1, 2), "drawer": (2, 5), "shelf": (1, 4),
                "dresser": (1, 1), "garbagecan": (1, 1), "safe": (0, 1), "armchair": (0, 1)},
    "bathroom": {"countertop": (1, 1), "sinkbasin": (1, 2), "cabinet": (2, 4), "drawer": (1, 3),
                 "toilet": (1, 1), "bathtubbasin": (1, 1), "towelholder": (1, 1), "shelf": (0, 2),
                 "garbagecan": (1, 1), "toiletpaperhanger": (1, 1)},
}

# object type -> properties ("clean", "heat", "cool", "light" = can be looked at under a lamp)
OBJECTS: dict[str, frozenset[str]] = {
    "apple": frozenset({"clean", "heat", "cool"}), "potato": frozenset({"clean", "heat", "cool"}),
    "tomato": frozenset({"clean", "heat", "cool"}), "egg": frozenset({"clean", "heat", "cool"}),
    "bread": frozenset({"heat", "cool"}), "lettuce": frozenset({"clean", "cool"}),
    "mug": frozenset({"clean", "heat", "cool", "light"}), "cup": frozenset({"clean", "heat", "cool"}),
    "plate": frozenset({"clean", "heat", "cool"}), "bowl": frozenset({"clean", "cool", "light"}),
    "pan": frozenset({"clean", "cool"}), "pot": frozenset({"clean", "cool"}),
    "winebottle": frozenset({"cool"}), "knife": frozenset({"clean"}), "fork": frozenset({"clean"}),
    "spoon": frozenset({"clean"}), "spatula": frozenset({"clean"}), "ladle": frozenset({"clean"}),
    "butterknife": frozenset({"clean"}), "dishsponge": frozenset({"clean"}), "kettle": frozenset({"clean"}),
    "saltshaker": frozenset(), "peppershaker": frozenset(), "soapbottle": frozenset(),
    "book": frozenset({"light"}), "cd": frozenset({"light"}), "cellphone": frozenset({"light"}),
    "creditcard": frozenset({"light"}), "keychain": frozenset({"light"}), "pen": frozenset({"light"}),
    "pencil": frozenset({"light"}), "alarmclock": frozenset({"light"}), "remotecontrol": frozenset({"light"}),
    "statue": frozenset({"light"}), "vase": frozenset({"light"}), "watch": frozenset({"light"}),
    "newspaper": frozenset({"light"}), "pillow": frozenset({"light"}), "laptop": frozenset({"light"}),
    "box": frozenset(), "tissuebox": frozenset(), "candle": frozenset(), "cloth": frozenset({"clean"}),
    "soapbar": frozenset({"clean"}), "spraybottle": frozenset(), "toiletpaper": frozenset(),
    "handtowel": frozenset(),
}

# room -> object types found there (where they may spawn and be task targets)
ROOM_OBJECTS: dict[str, tuple[str, ...]] = {
    "kitchen": ("apple", "potato", "tomato", "egg", "bread", "lettuce", "mug", "cup", "plate", "bowl", "pan",
                "pot", "winebottle", "knife", "fork", "spoon", "spatula", "ladle", "butterknife", "dishsponge",
                "kettle", "saltshaker", "peppershaker", "soapbottle"),
    "livingroom": ("book", "cellphone", "creditcard", "keychain", "remotecontrol", "statue", "vase", "watch",
                   "newspaper", "pillow", "laptop", "box", "tissuebox", "candle", "bowl", "mug"),
    "bedroom": ("book", "cd", "cellphone", "creditcard", "keychain", "pen", "pencil", "alarmclock", "pillow",
                "laptop", "mug", "bowl", "box", "vase", "statue", "watch"),
    "bathroom": ("soapbar", "soapbottle", "spraybottle", "toiletpaper", "handtowel", "cloth", "candle",
                 "dishsponge", "tissuebox"),
}

# receptacle types that may be task targets ("put X in/on Y"); appliances are tools, not targets
TARGETS: dict[str, tuple[str, ...]] = {
    "kitchen": ("cabinet", "drawer", "countertop", "fridge", "microwave", "diningtable", "shelf",
                "stoveburner", "garbagecan", "coffeemachine", "sinkbasin"),
    "livingroom": ("sofa", "armchair", "coffeetable", "sidetable", "shelf", "drawer", "cabinet", "tvstand",
                   "garbagecan", "safe", "dresser"),
    "bedroom": ("bed", "desk", "sidetable", "drawer", "shelf", "dresser", "garbagecan", "safe", "armchair"),
    "bathroom": ("countertop", "cabinet", "drawer", "toilet", "bathtubbasin", "shelf", "garbagecan",
                 "sinkbasin"),
}
# where a desk lamp stands, by room (rooms without one never get look-at-in-light tasks)
LAMP_HOSTS = {"livingroom": ("sidetable", "dresser"), "bedroom": ("desk", "sidetable", "dresser")}

GOALS = {
    "pick_and_place": ("put a {o} in {r}.", "put some {o} on {r}."),
    "look_at_obj_in_light": ("look at {o} under the desklamp.", "examine the {o} with the desklamp."),
    "pick_clean_then_place": ("put a clean {o} in {r}.", "clean some {o} and put it in {r}."),
    "pick_heat_then_place": ("put a hot {o} in {r}.", "heat some {o} and put it in {r}."),
    "pick_cool_then_place": ("put a cool {o} in {r}.", "cool some {o} and put it in {r}."),
    "pick_two_obj_and_place": ("put two {o} in {r}.", "find two {o} and put them in {r}."),
}
UNSEEN_PERCENT = 20  # share of combinations held out for test_unseen


def needs(task_type: str) -> str | None:
    """The object property a task type needs ("clean", "heat", "cool", "light"), or None."""
    return {"pick_clean_then_place": "clean", "pick_heat_then_place": "heat", "pick_cool_then_place": "cool",
            "look_at_obj_in_light": "light"}.get(task_type)


def room_supports(room: str, task_type: str) -> bool:
    """Whether a room has what a task type needs (an appliance or a lamp)."""
    if task_type == "look_at_obj_in_light":
        return room in LAMP_HOSTS
    if task_type in APPLIANCE:
        return ROOMS[room].get(APPLIANCE[task_type][0], (0, 0))[0] >= 1
    return True


def is_unseen(room: str, task_type: str, obj: str, recep: str) -> bool:
    """A fixed, hash-based hold-out: the same combination is unseen on every machine and run."""
    key = f"{room}|{task_type}|{obj}|{recep}".encode()
    return zlib.crc32(key) % 100 < UNSEEN_PERCENT


@lru_cache(maxsize=None)
def combinations(room: str, task_type: str) -> tuple[tuple[str, str], ...]:
    """Every (object type, target receptacle type) pair a task of this type can use in this room."""
    if not room_supports(room, task_type):
        return ()
    prop = needs(task_type)
    objs = [o for o in ROOM_OBJECTS[room] if prop is None or prop in OBJECTS[o]]
    if task_type == "look_at_obj_in_light":
        return tuple((o, LAMP) for o in objs)
    appliance = APPLIANCE.get(task_type, ("", ""))[0]
    present = {t for t, (lo, _) in ROOMS[room].items() if lo >= 1 or t in TARGETS[room]}
    receps = [r for r in TARGETS[room] if r in present and r != appliance]
    return tuple((o, r) for o in objs for r in receps)


@lru_cache(maxsize=None)
def split_combinations(room: str, task_type: str, split: str) -> tuple[tuple[str, str], ...]:
    """The combinations a split draws from: train and test_seen share the seen ones."""
    unseen = split == "test_unseen"
    return tuple((o, r) for o, r in combinations(room, task_type) if is_unseen(room, task_type, o, r) == unseen)
