"""The SWE oracle's edits: the smallest `str_replace` calls that turn the buggy files into the fixed ones.

An engineer does not retype a file to change one operator: each turn the oracle diffs what the workspace
holds against the fix and sends one `str_replace` of the changed lines (indentation shared by both sides
left out), naming the line when the text occurs more than once. A call must fit `max_bytes` (the default
eval cuts an action at 256 tokens; the byte-level chat of scripted policies counts one token per byte), so a
long insertion goes in line-chunks over several turns and a long single line is narrowed to the changed
words. `plan_edits` simulates the whole episode: the synthesiser drops tasks it cannot solve within limits.
"""
from __future__ import annotations

import json

# The default eval's per-turn limit (agentgym.eval.records.EvalConfig.max_tokens; a test keeps them equal).
MAX_ACTION_BYTES = 256
MAX_EDIT_TURNS = 3  # more edit turns would not fit the default 8,192-token context beside the first prompt


def call_text(call: dict) -> str:
    return f"<tool_call>{json.dumps(call, ensure_ascii=False)}</tool_call>"


def _fits(call: dict, max_bytes: int) -> bool:
    return len(call_text(call).encode("utf-8")) <= max_bytes


def _common_lines(a: list[str], b: list[str]) -> tuple[int, int]:
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    return start, end


def _replace_call(path: str, text: str, first_line: int, old: str, new: str) -> dict:
    """A str_replace of `old` (starting on `first_line`) by `new`; names the line only when needed."""
    args: dict = {"path": path, "old_str": old, "new_str": new}
    if len(_occurrences(text, old)) != 1:
        args["line"] = first_line
    return {"name": "str_replace", "arguments": args}


def _trim(old: str, new: str) -> tuple[str, str, int]:
    """Drop the leading whitespace both sides share and a shared final newline; (old, new, chars dropped)."""
    lead = 0
    while lead < min(len(old), len(new)) and old[lead] == new[lead] and old[lead] in " \t":
        lead += 1
    old, new = old[lead:], new[lead:]
    if old.endswith("\n") and new.endswith("\n") and len(old) > 1:
        old, new = old[:-1], new[:-1]
    return old, new, lead


def next_edit(path: str, current: str, target: str, max_bytes: int = MAX_ACTION_BYTES) -> dict | None:
    """The next str_replace call toward `target`, or None when there is nothing to do or no call fits."""
    if current == target:
        return None
    cur, fix = current.splitlines(keepends=True), target.splitlines(keepends=True)
    start, end = _common_lines(cur, fix)
    old_lines, new_lines = cur[start:len(cur) - end], fix[start:len(fix) - end]
    if not old_lines:  # a pure insertion: anchor it on the line before (or after, at the top of the file)
        if start > 0:
            start -= 1
            old_lines, new_lines = [cur[start]], [cur[start], *new_lines]
        elif end > 0:
            old_lines, new_lines = [cur[0]], [*new_lines, cur[0]]
        else:
            return None
    old, new, _ = _trim("".join(old_lines), "".join(new_lines))
    call = _replace_call(path, current, start + 1, old, new)
    if _fits(call, max_bytes):
        return call
    for keep in range(len(new_lines) - 1, 0, -1):  # insert the first lines now, the rest in later turns
        if keep < len(new_lines) and new_lines[keep - 1].endswith("\n"):
            old, new, _ = _trim("".join(old_lines), "".join(new_lines[:keep]))
            if old and new != old:
                call = _replace_call(path, current, start + 1, old, new)
                if _fits(call, max_bytes):
                    return call
    if len(old_lines) == 1 and len(new_lines) == 1:
        return _narrow(path, current, start, old_lines[0], new_lines[0], max_bytes)
    return None


def _narrow(path: str, current: str, line_index: int, old: str, new: str, max_bytes: int) -> dict | None:
    """One long changed line: replace only the changed words (whitespace-bounded, widened until unique)."""
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    a, b = p, len(old) - s
    while a > 0 and not old[a - 1].isspace():
        a -= 1
    while b < len(old) and not old[b].isspace():
        b += 1
    line_start = sum(len(x) for x in current.splitlines(keepends=True)[:line_index])
    while True:
        piece, fixed = old[a:b], new[a:len(new) - (len(old) - b)]
        if piece and current.count(piece, line_start, line_start + len(old)) == 1:
            call = _replace_call(path, current, line_index + 1, piece, fixed)
            return call if _fits(call, max_bytes) else None
        if a == 0 and b >= len(old):
            return None
        a, b = max(0, a - 1), min(len(old), b + 1)


def apply_call(text: str, call: dict) -> str:
    """What the env's str_replace does with a call (the oracle's own simulation of it)."""
    args = call["arguments"]
    old, new, line = args["old_str"], args["new_str"], args.get("line", 0)
    starts = _occurrences(text, old)
    if line:
        starts = [i for i in starts if text.count("\n", 0, i) + 1 == line]
    if len(starts) != 1:
        raise ValueError(f"old_str occurs {len(starts)} times")
    return text[: starts[0]] + new + text[starts[0] + len(old):]


def _occurrences(text: str, old: str) -> list[int]:
    found, i = [], text.find(old)
    while old and i != -1:
        found.append(i)
        i = text.find(old, i + 1)
    return found


def plan_edits(path: str, current: str, target: str, max_bytes: int = MAX_ACTION_BYTES,
               max_turns: int = MAX_EDIT_TURNS) -> list[dict] | None:
    """Every call the oracle will send for one file, or None if it cannot reach `target` in `max_turns`."""
    calls: list[dict] = []
    while current != target:
        call = next_edit(path, current, target, max_bytes)
        if call is None or len(calls) >= max_turns:
            return None
        try:
            current = apply_call(current, call)
        except ValueError:
            return None
        calls.append(call)
    return calls
