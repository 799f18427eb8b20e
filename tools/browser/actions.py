"""Browser actions as text: click(12), type(12, "red shoes"), select(7, "large"), scroll(down), back().

The last action in the model's text counts (so it may think first). Arguments are an element id from the
latest snapshot and, for type/select, a JSON-style string (double or single quotes; escapes allowed).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

VERBS = ("click", "type", "select", "scroll", "back")
USAGE = ('click(ID) | type(ID, "text") | select(ID, "option") | scroll(down) | scroll(up) | back() '
         '- ID is the number in [brackets] before an element')
_CALL = re.compile(r"\b(click|type|select|scroll|back)\s*\(((?:[^()\"']|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*')*)\)",
                   re.I | re.S)
MAX_TEXT = 2000


class ActionError(ValueError):
    """The action could not be read; the message says how to write it."""


@dataclass(frozen=True)
class BrowserAction:
    verb: str
    element: int | None = None
    text: str = ""


def parse_browser_action(text: str) -> BrowserAction:
    matches = list(_CALL.finditer(text[-20_000:] if isinstance(text, str) else ""))
    if not matches:
        raise ActionError(f"No browser action found. Use one of: {USAGE}.")
    verb, raw = matches[-1].group(1).lower(), matches[-1].group(2).strip()
    if verb == "back":
        return BrowserAction("back")
    if verb == "scroll":
        direction = raw.strip("\"' ").lower() or "down"
        if direction not in ("up", "down"):
            raise ActionError(f"scroll takes up or down, got {raw[:40]!r}: scroll(down)")
        return BrowserAction("scroll", text=direction)
    head, _, rest = raw.partition(",")
    try:
        element = int(head.strip().strip("[]"))
    except ValueError:
        raise ActionError(f"{verb} needs an element id (a number), got {head.strip()[:40]!r}: {USAGE}") from None
    if verb == "click":
        return BrowserAction("click", element)
    rest = rest.strip()
    if not rest:
        raise ActionError(f'{verb} needs text after the id, e.g. {verb}({element}, "...")')
    try:
        value = ast.literal_eval(rest) if rest[0] in "\"'" else rest
    except (ValueError, SyntaxError):
        value = rest.strip("\"'")
    if not isinstance(value, str):
        value = str(value)
    return BrowserAction(verb, element, value[:MAX_TEXT])
