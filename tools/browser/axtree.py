"""Chrome's accessibility tree (CDP `Accessibility.getFullAXTree`) -> indented text with element ids.

Each kept node is a line `[id] role "name" (states)`. Ids count 1, 2, 3... in page order, so the same page
gives the same text on every load (Chrome's backendDOMNodeIds grow with every document, which would make
a seed's first observation differ between runs and split GiGPO's anchors); the returned map turns an id
back into the backendDOMNodeId that actions take. Names are JSON-quoted, so page text that looks like `[5] button`
stays inside quotes and never becomes an element. Ignored and nameless generic nodes are skipped (their
children move up); static text equal to its parent's name is dropped as a duplicate.
"""
from __future__ import annotations

import json
from typing import Any

SKIP_ROLES = frozenset({"none", "generic", "InlineTextBox", "LineBreak", "presentation", "RootWebArea",
                        "ListMarker"})
TEXT_ROLES = frozenset({"StaticText", "text"})
STATES = ("focused", "checked", "selected", "expanded", "disabled", "pressed", "required", "readonly")


def _value(field: Any) -> Any:
    return field.get("value") if isinstance(field, dict) else None


def format_ax_tree(nodes: list[dict[str, Any]], root_backend_id: int | None = None, max_chars: int = 12_000,
                   exclude_backend_ids: frozenset[int] = frozenset()) -> tuple[str, dict[int, int]]:
    """(text, {id shown: backendDOMNodeId}). `root_backend_id` limits the tree to one element's subtree; the subtrees of
    `exclude_backend_ids` are left out (a page's own chrome, e.g. MiniWoB's reward display)."""
    by_id = {n["nodeId"]: n for n in nodes}
    roots = [n for n in nodes if not n.get("parentId") or n["parentId"] not in by_id]
    if root_backend_id is not None:
        roots = [n for n in nodes if n.get("backendDOMNodeId") == root_backend_id] or roots
    lines: list[str] = []
    ids: dict[int, int] = {}
    size = 0
    stack: list[tuple[dict, int, str]] = [(r, 0, "") for r in reversed(roots)]
    while stack and size <= max_chars:
        node, depth, parent_name = stack.pop()
        if node.get("backendDOMNodeId") in exclude_backend_ids:
            continue
        role = str(_value(node.get("role")) or "")
        name = " ".join(str(_value(node.get("name")) or "").split())
        keep = not node.get("ignored") and role not in SKIP_ROLES and not (role in TEXT_ROLES and
                                                                          (not name or name == parent_name))
        if role in ("generic", "none") and not node.get("ignored") and name and not _has_children(node, by_id):
            keep = True
        child_depth, child_parent = depth, parent_name
        if keep:
            line = _line(node, role, name, ids)
            lines.append("  " * depth + line)
            size += len(line) + 2 * depth + 1
            child_depth, child_parent = depth + 1, name
        for child_id in reversed(node.get("childIds") or []):
            child = by_id.get(child_id)
            if child is not None:
                stack.append((child, child_depth, child_parent))
    text = "\n".join(lines)
    if stack:
        text += "\n... (page cut here; scroll(down) to see more)"
    return text, ids


def _has_children(node: dict, by_id: dict) -> bool:
    return any(c in by_id for c in node.get("childIds") or [])


def _line(node: dict, role: str, name: str, ids: dict[int, int]) -> str:
    backend = node.get("backendDOMNodeId")
    parts = []
    if backend is not None:   # text too: pages make clickable <span>s that have no role of their own
        ids[len(ids) + 1] = int(backend)
        parts.append(f"[{len(ids)}]")
    parts.append(role)
    if name:
        parts.append(json.dumps(name[:300], ensure_ascii=False))
    value = _value(node.get("value"))
    if value not in (None, "") and role not in TEXT_ROLES:
        parts.append(f"value={json.dumps(str(value)[:200], ensure_ascii=False)}")
    states = []
    for prop in node.get("properties") or []:
        pname, pval = prop.get("name"), _value(prop.get("value"))
        if pname in STATES and pval not in (None, False, "false"):
            states.append(pname if pval in (True, "true") else f"{pname}={pval}")
    if states:
        parts.append("(" + ", ".join(states) + ")")
    return " ".join(parts)
