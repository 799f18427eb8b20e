"""Browser pieces that need no browser: the action parser and the accessibility-tree formatter."""
import pytest

from agentgym.tools.browser import ActionError, BrowserAction, format_ax_tree, parse_browser_action


@pytest.mark.parametrize("text, action", [
    ("click(12)", BrowserAction("click", 12)),
    ("I will press it.\nclick( [12] )", BrowserAction("click", 12)),
    ('type(3, "red shoes, size 9")', BrowserAction("type", 3, "red shoes, size 9")),
    ("type(3, 'it\\'s (quoted)')", BrowserAction("type", 3, "it's (quoted)")),
    ('select(7, "Large")', BrowserAction("select", 7, "Large")),
    ("scroll(down)", BrowserAction("scroll", text="down")),
    ("SCROLL('up')", BrowserAction("scroll", text="up")),
    ("back()", BrowserAction("back")),
    ("click(1) then click(2)", BrowserAction("click", 2)),            # the last action counts
])
def test_parse_browser_action(text, action):
    assert parse_browser_action(text) == action


@pytest.mark.parametrize("text, message", [
    ("", "No browser action"), ("press the button", "No browser action"), ("click(abc)", "element id"),
    ("type(3)", "needs text"), ("scroll(left)", "up or down"), ("\x00" * 100_000, "No browser action"),
])
def test_bad_actions_say_how_to_fix_them(text, message):
    with pytest.raises(ActionError, match=message):
        parse_browser_action(text)


def test_typed_text_is_capped():
    assert len(parse_browser_action('type(1, "' + "a" * 10_000 + '")').text) == 2000


def node(node_id, role, name="", children=(), backend=None, parent=None, ignored=False, props=(), value=None):
    n = {"nodeId": str(node_id), "role": {"value": role}, "name": {"value": name},
         "childIds": [str(c) for c in children], "ignored": ignored,
         "properties": [{"name": k, "value": {"value": v}} for k, v in props]}
    if backend is not None:
        n["backendDOMNodeId"] = backend
    if parent is not None:
        n["parentId"] = str(parent)
    if value is not None:
        n["value"] = {"value": value}
    return n


TREE = [
    node(1, "RootWebArea", "Shop", [2, 6], backend=1),
    node(2, "generic", "", [3, 4], backend=20, parent=1),
    node(3, "link", "Next >", [7], backend=30, parent=2),
    node(7, "StaticText", "Next >", [], backend=31, parent=3),          # duplicate of its parent's name
    node(4, "textbox", "search", [], backend=40, parent=2, props=[("focused", True)], value="red"),
    node(6, "StaticText", '[99] button "Pay"', [], backend=60, parent=1),
    node(8, "button", "hidden", [], backend=80, parent=1, ignored=True),
]


def test_ax_tree_lines_ids_and_quoting():
    text, ids = format_ax_tree(TREE)
    assert text.splitlines() == ['[1] link "Next >"', '[2] textbox "search" value="red" (focused)',
                                 '[3] StaticText "[99] button \\"Pay\\""']
    assert ids == {1: 30, 2: 40, 3: 60} and 99 not in ids   # the ignored button (80) is not shown


def test_ax_tree_subtree_exclusion_and_cut():
    text, ids = format_ax_tree(TREE, root_backend_id=20)
    assert ids == {1: 30, 2: 40}
    text, ids = format_ax_tree(TREE, exclude_backend_ids=frozenset({20}))
    assert ids == {1: 60} and text == '[1] StaticText "[99] button \\"Pay\\""'
    many = [node(1, "RootWebArea", "", list(range(2, 500)), backend=1)] + [
        node(i, "button", f"b{i}", [], backend=i, parent=1) for i in range(2, 500)]
    text, ids = format_ax_tree(many, max_chars=200)
    assert len(text) < 400 and text.endswith("scroll(down) to see more)") and len(ids) < 30
