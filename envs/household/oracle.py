"""Goal tests, subgoals and the oracle planner of the household world.

The oracle knows the whole world, so it never searches: from any state (also after a policy's
detours) it picks the object to fetch, the appliance or lamp to use and the receptacle to fill, and
returns the next operation. Every generated task is solvable this way, which the tests check.
"""
from __future__ import annotations

from agentgym.envs.household import catalog as cat
from agentgym.envs.household.engine import Op, command, execute
from agentgym.envs.household.world import NOWHERE, World

MAX_PLAN = 400  # far above any real plan; a guard against a planner bug looping forever


def _requirement(w: World) -> list[bool] | None:
    prop = cat.needs(w.task.task_type)
    return {"clean": w.clean, "heat": w.hot, "cool": w.cool}.get(prop or "")


def _needed(w: World) -> int:
    return 2 if w.task.task_type == "pick_two_obj_and_place" else 1


def _count_in(w: World, r: int, req: list[bool] | None) -> int:
    t = w.task.obj_type
    return sum(1 for o in w.contents[r] if w.otype[o] == t and (req is None or req[o]))


def success(w: World) -> bool:
    """Whether the goal holds now."""
    if w.task.task_type == "look_at_obj_in_light":
        h = w.holding
        return h != NOWHERE and w.otype[h] == w.task.obj_type and w.lamp_on and w.loc == w.oloc[w.lamp]
    req, need = _requirement(w), _needed(w)
    return any(_count_in(w, r, req) >= need for r in w.targets)


def subgoals(w: World) -> set[str]:
    """Milestones towards the goal that hold now (the env pays each once, if shaping is on)."""
    t, done = w.task.obj_type, set()
    h = w.holding
    if h != NOWHERE and w.otype[h] == t:
        done |= {"found", "picked"}
    elif w.loc != NOWHERE and w.visible(w.loc) and any(w.otype[o] == t for o in w.contents[w.loc]):
        done.add("found")
    req = _requirement(w)
    if req is not None and any(req[o] for o in range(len(req)) if w.otype[o] == t):
        done.add("transformed")
    if w.task.task_type == "look_at_obj_in_light" and w.lamp_on:
        done.add("lamp_on")
    if w.task.task_type == "pick_two_obj_and_place" and any(_count_in(w, r, None) for r in w.targets):
        done.add("placed_one")
    return done


def _target(w: World, req: list[bool] | None) -> int:
    """The receptacle to fill: the one already holding most good objects, else the first."""
    return max(w.targets, key=lambda r: (_count_in(w, r, req), -r))


def _reach(w: World, r: int, then: Op) -> Op:
    """Go to receptacle r, open it if needed, then do `then`."""
    if w.loc != r:
        return ("go", r, -1)
    if not w.visible(r) and then[0] in ("take", "put"):
        return ("open", r, -1)
    return then


def next_op(w: World) -> Op | None:
    """The oracle's next operation from the current state; None once the goal holds."""
    if success(w):
        return None
    req, t, h = _requirement(w), w.task.obj_type, w.holding
    look = w.task.task_type == "look_at_obj_in_light"
    target = NOWHERE if look else _target(w, req)
    if h != NOWHERE and w.otype[h] != t:  # put the wrong thing down where we stand (or anywhere)
        return _reach(w, w.loc if w.loc != NOWHERE else 0, ("put", h, w.loc if w.loc != NOWHERE else 0))
    if h != NOWHERE:
        if req is not None and not req[h]:
            appliance = w.rtype.index(cat.APPLIANCE[w.task.task_type][0])
            verb = cat.APPLIANCE[w.task.task_type][1]
            return _reach(w, appliance, (verb, h, appliance))
        if look:
            host = w.oloc[w.lamp]
            return _reach(w, host, ("use", w.lamp, host))
        return _reach(w, target, ("put", h, target))
    placed = set(w.contents[target]) if target != NOWHERE else set()
    todo = [o for o in range(len(w.otype)) if w.otype[o] == t and not (o in placed and (req is None or req[o]))]
    o = min(todo, key=lambda o: (w.oloc[o] != w.loc, not w.visible(w.oloc[o]), o))
    return _reach(w, w.oloc[o], ("take", o, w.oloc[o]))


def oracle_command(w: World) -> str | None:
    op = next_op(w)
    return None if op is None else command(w, op)


def plan(w: World) -> list[str]:
    """The oracle's full plan from this state (the world is not changed): a demonstration."""
    sim, steps = w.copy(), []
    while len(steps) < MAX_PLAN:
        op = next_op(sim)
        if op is None:
            return steps
        steps.append(command(sim, op))
        execute(sim, op)
    raise RuntimeError(f"oracle plan exceeded {MAX_PLAN} steps for {w.task.task_id} (a planner bug)")
