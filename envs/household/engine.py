"""Commands of the household world: the admissible list, parsing, checking and executing.

An operation is a tuple `(verb, a, b)` over indices (receptacle or object). `admissible(world)`
maps every admissible command string to its operation, so a well-formed command is one dict lookup;
anything else goes through `parse` and `check`, which say what was wrong and how to do it right.
"""
from __future__ import annotations

import re

from agentgym.envs.household import catalog as cat
from agentgym.envs.household.world import NOWHERE, World

Op = tuple  # (verb, a, b): verb in VERBS; a, b receptacle/object indices or -1

COMMAND_HELP = ("go to <receptacle>, open <receptacle>, close <receptacle>, take <object> from <receptacle>, "
                "put <object> in/on <receptacle>, heat/cool/clean <object> with <appliance>, use <lamp>, "
                "examine <thing>, inventory, look")
APPLIANCE_VERB = {"microwave": ("heat", "heated"), "fridge": ("cool", "cooled"), "sinkbasin": ("clean", "cleaned")}
VERB_PROP = {"heat": "heat", "cool": "cool", "clean": "clean"}
_ARTICLE = re.compile(r"\b(?:the|a|an|some)\s+")
_PATTERNS = [  # (regex, verb); names are resolved afterwards
    (re.compile(r"^(?:go to|goto|go|walk to|move to|travel to)\s+(.+)$"), "go"),
    (re.compile(r"^open\s+(.+)$"), "open"),
    (re.compile(r"^close\s+(.+)$"), "close"),
    (re.compile(r"^(?:take|pick up|get|grab)\s+(.+?)\s+(?:from|off|out of)\s+(.+)$"), "take"),
    (re.compile(r"^(?:take|pick up|get|grab)\s+(.+)$"), "take"),
    (re.compile(r"^(?:put|place|move|drop)\s+(.+?)\s+(?:in/on|in|on|into|onto|inside|to)\s+(.+)$"), "put"),
    (re.compile(r"^(heat|cool|clean)\s+(.+?)\s+(?:with|using|in)\s+(.+)$"), "transform"),
    (re.compile(r"^(?:use|turn on|switch on|toggle)\s+(.+)$"), "use"),
    (re.compile(r"^(?:examine|look at|inspect|x)\s+(.+)$"), "examine"),
]


# ---------------------------------------------------------------------------------------------- text
def a_list(names: list[str]) -> str:
    """ALFWorld's listing: "a apple 1, a mug 2, and a knife 1"."""
    if not names:
        return "nothing"
    items = [f"a {n}" for n in names]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


def describe_recep(w: World, r: int) -> str:
    name = w.rname[r]
    if not w.visible(r):
        return f"The {name} is closed."
    seen = a_list([w.oname[o] for o in w.contents[r]])
    if w.openable[r]:
        return f"The {name} is open. In it, you see {seen}."
    return f"On the {name}, you see {seen}."


def room_intro(w: World) -> str:
    return (f"You are in the middle of a {w.task.room}. Looking quickly around you, you see "
            f"{a_list(w.rname)}.")


def describe_obj(w: World, o: int) -> str:
    if w.otype[o] == cat.LAMP:
        return f"The {w.oname[o]} is {'on' if w.lamp_on else 'off'}."
    states = [s for s, on in (("hot", w.hot[o]), ("cool", w.cool[o]), ("clean", w.clean[o])) if on]
    if not states:
        return f"There's nothing special about {w.oname[o]}."
    return f"The {w.oname[o]} is {' and '.join(states)}."


# ---------------------------------------------------------------------------------------------- admissible
def admissible(w: World, gotos: list[list[str]], go_ops: list[list[Op]]) -> dict[str, Op]:
    """Every admissible command at this state, mapped to its operation (ALFWorld's list, in its order)."""
    acts: dict[str, Op] = dict(zip(gotos[w.loc], go_ops[w.loc]))
    r, held = w.loc, w.holding
    if r != NOWHERE:
        name = w.rname[r]
        if w.openable[r]:
            acts[("close " if w.is_open[r] else "open ") + name] = ("close" if w.is_open[r] else "open", r, -1)
        if w.visible(r):
            for o in w.contents[r]:
                if o == w.lamp:
                    acts["use " + w.oname[o]] = ("use", o, r)
                elif held == NOWHERE:
                    acts[f"take {w.oname[o]} from {name}"] = ("take", o, r)
            if held != NOWHERE:
                acts[f"put {w.oname[held]} in/on {name}"] = ("put", held, r)
        if held != NOWHERE and w.rtype[r] in APPLIANCE_VERB:
            verb = APPLIANCE_VERB[w.rtype[r]][0]
            if VERB_PROP[verb] in cat.OBJECTS[w.otype[held]]:
                acts[f"{verb} {w.oname[held]} with {name}"] = (verb, held, r)
        acts["examine " + name] = ("examine_r", r, -1)
    if held != NOWHERE:
        acts["examine " + w.oname[held]] = ("examine_o", held, -1)
    acts["inventory"] = ("inventory", -1, -1)
    acts["look"] = ("look", -1, -1)
    return acts


def goto_tables(w: World) -> tuple[list[list[str]], list[list[Op]]]:
    """The "go to" commands from each location (index -1 = the middle of the room), computed once."""
    cmds = ["go to " + n for n in w.rname]
    ops = [("go", i, -1) for i in range(len(w.rname))]
    gotos = [[c for i, c in enumerate(cmds) if i != loc] for loc in range(len(cmds))]
    go_ops = [[p for i, p in enumerate(ops) if i != loc] for loc in range(len(cmds))]
    return gotos + [cmds], go_ops + [ops]  # gotos[-1] is the middle of the room


# ---------------------------------------------------------------------------------------------- parse/check
def normalize(action: str) -> str:
    text = " ".join(action[:1000].lower().split())
    if not text.isprintable():  # control characters and lone surrogates never echo back
        text = "".join(ch for ch in text if ch.isprintable())
    return text.lstrip("> ").rstrip(" .!")[:300]


def parse(w: World, cmd: str) -> tuple[Op | None, str]:
    """An operation from a command in any accepted phrasing, or None and what was wrong."""
    if cmd in ("inventory", "i", "inv", "check inventory"):
        return ("inventory", -1, -1), ""
    if cmd in ("look", "l", "look around"):
        return ("look", -1, -1), ""
    for pattern, verb in _PATTERNS:
        m = pattern.match(cmd)
        if m is None:
            continue
        groups = [_ARTICLE.sub("", g).strip() for g in m.groups()]
        if verb == "transform":
            verb, groups = groups[0], groups[1:]
        return _resolve(w, verb, groups)
    if not cmd:
        return None, "Your action was empty. Reply with one command."
    shown = cmd if len(cmd) <= 60 else cmd[:57] + "..."
    return None, f'I do not understand "{shown}". Commands: {COMMAND_HELP}.'


def _resolve(w: World, verb: str, names: list[str]) -> tuple[Op | None, str]:
    ids = []
    for name in names:
        hit = w.names.get(name)
        if hit is None:
            return None, _unknown_name(w, name)
        ids.append(hit)
    kinds = [k for k, _ in ids]
    idx = [i for _, i in ids]
    want = {"go": ["r"], "open": ["r"], "close": ["r"], "take": ["o", "r"], "put": ["o", "r"], "heat": ["o", "r"],
            "cool": ["o", "r"], "clean": ["o", "r"], "use": ["o"]}.get(verb)
    if verb == "take" and kinds == ["o"]:  # "take apple 1": from wherever the agent stands
        return ("take", idx[0], w.loc), ""
    if verb == "examine":
        return ("examine_r" if kinds[0] == "r" else "examine_o", idx[0], -1), ""
    if want != kinds:
        return None, f"The command should read: {_form(verb)}."
    return (verb, idx[0], idx[1] if len(idx) > 1 else -1), ""


def _form(verb: str) -> str:
    return {"go": "go to <receptacle>", "open": "open <receptacle>", "close": "close <receptacle>",
            "take": "take <object> from <receptacle>", "put": "put <object> in/on <receptacle>",
            "use": "use <lamp>"}.get(verb, f"{verb} <object> with <appliance>")


def _unknown_name(w: World, name: str) -> str:
    if name in cat.OBJECTS or name in cat.ROOMS.get(w.task.room, {}) or name in (cat.LAMP,) or \
            any(name in types for types in cat.ROOMS.values()):
        return f'Say which one: things are named with a number, e.g. "{name} 1".'
    shown = name if len(name) <= 40 else name[:37] + "..."
    return f'There is no "{shown}" here. Use the names you were shown, e.g. "{w.rname[0]}".'


def check(w: World, op: Op) -> str:
    """Why an operation cannot be done here ("" if it can). Mirrors `admissible`."""
    verb, a, b = op
    here = w.loc
    if verb == "go":
        return f"You are already at the {w.rname[a]}." if a == here else ""
    if verb in ("inventory", "look"):
        return ""
    if verb == "examine_o":
        return "" if a == w.holding else f"Take the {w.oname[a]} first to examine it closely."
    if verb in ("open", "close", "examine_r"):
        return _check_recep_verb(w, verb, a)
    if verb == "use":
        if a != w.lamp:
            return f"The {w.oname[a]} cannot be used; only a {cat.LAMP} can be turned on."
        return "" if w.oloc[a] == here else f"Go to the {w.rname[w.oloc[a]]} first, where the {w.oname[a]} is."
    return _check_object_verb(w, verb, a, b)


def _check_recep_verb(w: World, verb: str, r: int) -> str:
    if r != w.loc:
        return f"You are not at the {w.rname[r]}; go to {w.rname[r]} first."
    if verb == "examine_r":
        return ""
    if not w.openable[r]:
        return f"The {w.rname[r]} cannot be opened or closed."
    if (verb == "open") == w.is_open[r]:
        return f"The {w.rname[r]} is already {'open' if w.is_open[r] else 'closed'}."
    return ""


def _check_object_verb(w: World, verb: str, o: int, r: int) -> str:
    oname = w.oname[o]
    if verb != "take" and w.holding != o:
        return f"You are not carrying the {oname}; take it first."
    if r == NOWHERE:
        return "You are in the middle of the room; go to a receptacle first."
    if r != w.loc:
        return f"You are not at the {w.rname[r]}; go to {w.rname[r]} first."
    if verb == "take":
        if w.holding != NOWHERE:
            return f"You are already carrying the {w.oname[w.holding]}; put it somewhere first (one object at a time)."
        if o == w.lamp:
            return f"The {oname} cannot be picked up; use it instead."
        if not w.visible(r):
            return f"The {w.rname[r]} is closed; open it first."
        return "" if w.oloc[o] == r else f"The {oname} is not in/on the {w.rname[r]}."
    if verb == "put":
        return "" if w.visible(r) else f"The {w.rname[r]} is closed; open it first."
    appliance = {v[0]: t for t, v in APPLIANCE_VERB.items()}[verb]
    if w.rtype[r] != appliance:
        return f"You can only {verb} things with a {appliance}."
    if VERB_PROP[verb] not in cat.OBJECTS[w.otype[o]]:
        return f"The {oname} cannot be {APPLIANCE_VERB[appliance][1]}."
    return ""


# ---------------------------------------------------------------------------------------------- execute
def execute(w: World, op: Op) -> str:
    """Apply an admissible operation and return what the agent sees."""
    verb, a, b = op
    if verb == "go":
        w.loc = a
        return f"You arrive at {w.rname[a]}. " + describe_recep(w, a)
    if verb == "open":
        w.is_open[a] = True
        return f"You open the {w.rname[a]}. " + describe_recep(w, a)
    if verb == "close":
        w.is_open[a] = False
        return f"You close the {w.rname[a]}."
    if verb == "take":
        w.contents[b].remove(a)
        w.oloc[a], w.holding = NOWHERE, a
        return f"You pick up the {w.oname[a]} from the {w.rname[b]}."
    if verb == "put":
        w.place(a, b)
        w.holding = NOWHERE
        return f"You put the {w.oname[a]} in/on the {w.rname[b]}."
    if verb in ("heat", "cool", "clean"):
        getattr(w, "hot" if verb == "heat" else verb)[a] = True
        if verb == "heat":
            w.cool[a] = False
        elif verb == "cool":
            w.hot[a] = False
        return f"You {verb} the {w.oname[a]} using the {w.rname[b]}."
    if verb == "use":
        w.lamp_on = True
        return f"You turn on the {w.oname[a]}."
    if verb == "examine_r":
        return describe_recep(w, a)
    if verb == "examine_o":
        return describe_obj(w, a)
    if verb == "inventory":
        return f"You are carrying: a {w.oname[w.holding]}." if w.holding != NOWHERE else "You are not carrying anything."
    if w.loc == NOWHERE:  # look
        return room_intro(w)
    return f"You are at the {w.rname[w.loc]}. " + describe_recep(w, w.loc)


def command(w: World, op: Op) -> str:
    """The canonical (admissible-list) text of an operation."""
    verb, a, b = op
    if verb == "go":
        return "go to " + w.rname[a]
    if verb in ("open", "close"):
        return f"{verb} {w.rname[a]}"
    if verb == "take":
        return f"take {w.oname[a]} from {w.rname[b]}"
    if verb == "put":
        return f"put {w.oname[a]} in/on {w.rname[b]}"
    if verb in ("heat", "cool", "clean"):
        return f"{verb} {w.oname[a]} with {w.rname[b]}"
    if verb == "use":
        return "use " + w.oname[a]
    if verb in ("examine_r", "examine_o"):
        return "examine " + (w.rname[a] if verb == "examine_r" else w.oname[a])
    return verb
