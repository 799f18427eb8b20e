"""Action templates: an admissible action with a slot the agent writes, such as the web shop's
"search[<query>]". In `rollout.action_mode=admissible` the policy writes the slot (free text after the
template's prefix) and the written action joins the listed ones as a candidate (`Choice.written`), so one
turn both chooses among the page's clicks and writes its own query; an expert's demonstration fills the slot
with the expert's text.
"""
from __future__ import annotations

import re
from typing import Sequence

SLOT = re.compile(r"<[a-z_]+>")


def template_parts(action: str) -> tuple[str, str] | None:
    """(text before the slot, text after it) of a template action, or None for a plain action."""
    m = SLOT.search(action)
    return None if m is None else (action[:m.start()], action[m.end():])


def fills(template: str, action: str) -> bool:
    """Whether `action` is `template` with its slot written (non-empty)."""
    parts = template_parts(template)
    if parts is None or SLOT.search(action):
        return False
    prefix, suffix = parts
    return (len(action) > len(prefix) + len(suffix) and action.startswith(prefix) and action.endswith(suffix))


def first_template(actions: Sequence[str]) -> int | None:
    """Index of the first template among `actions` (the one a policy writes), or None."""
    return next((i for i, a in enumerate(actions) if template_parts(a) is not None), None)


def written_into(actions: Sequence[str], action: str) -> tuple[list[str], int] | None:
    """`actions` with the template `action` fills replaced by `action`, and its index; None when `action`
    fills none of them (a listed action, or text outside the list)."""
    for i, listed in enumerate(actions):
        if fills(listed, action):
            out = list(actions)
            out[i] = action
            return out, i
    return None


def without_templates(actions: Sequence[str]) -> list[str]:
    """The listed actions that need no writing."""
    return [a for a in actions if template_parts(a) is None]
