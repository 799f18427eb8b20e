"""@tool schemas, validation and run_tool: every way a call can go wrong becomes an observation."""
from typing import Literal, Optional

import jsonschema
import pytest

from agentgym.errors import ToolError
from agentgym.tools import Tool, ToolCall, run_tool, tool


@tool
def search(query: str, k: int = 3, mode: Literal["bm25", "dense"] = "bm25", tags: Optional[list[str]] = None,
           weight: float = 1.0, exact: bool = False, extra: dict | None = None) -> str:
    """Search the corpus for passages.

    Longer explanation that is not part of the argument list.

    Args:
        query: What to look for.
        k: How many passages to return,
            at most ten.
        mode: Which retriever.
        tags: Only passages with these tags.
        weight: A score weight.
        exact: Exact match only.
        extra: Anything else.

    Returns:
        The passages, one per line.
    """
    return f"{query}:{k}:{mode}"


def test_schema_is_derived_from_signature_and_docstring():
    assert isinstance(search, Tool) and search.name == "search"
    fn = search.schema["function"]
    assert fn["description"].startswith("Search the corpus for passages.")
    props = fn["parameters"]["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["k"] == {"type": "integer", "description": "How many passages to return, at most ten.", "default": 3}
    assert props["mode"]["enum"] == ["bm25", "dense"] and props["mode"]["type"] == "string"
    assert props["tags"]["type"] == "array" and props["tags"]["items"] == {"type": "string"}
    assert props["weight"]["type"] == "number" and props["exact"]["type"] == "boolean"
    assert props["extra"]["type"] == "object"
    assert fn["parameters"]["required"] == ["query"]
    assert "Returns" not in fn["description"] and "passages, one per line" not in str(props)


def test_schema_is_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(search.parameters)
    jsonschema.validate({"query": "x", "k": 2, "tags": ["a"]}, search.parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"k": 2}, search.parameters)


def test_decorator_with_options_and_methods():
    @tool(name="lookup", timeout_s=2.0, description="Look it up.")
    def f(x: int) -> int:
        return x + 1

    assert (f.name, f.timeout_s, f.description, f(1)) == ("lookup", 2.0, "Look it up.", 2)

    class Box:
        def __init__(self):
            self.n = 5

        @tool
        def add(self, x: int) -> int:
            """Add to the box.

            Args:
                x: How much.
            """
            return self.n + x

    bound = Box().add
    assert isinstance(bound, Tool) and bound(x=2) == 7
    assert list(bound.parameters["properties"]) == ["x"]


def test_unsupported_type_is_a_tool_error():
    class Thing:
        pass

    def g(thing: Thing) -> str:
        return ""

    with pytest.raises(ToolError, match="no JSON schema"):
        Tool(g)


def test_usage_is_a_parseable_call():
    from agentgym.tools import parse_hermes

    (call,) = parse_hermes(search.usage())
    assert call.name == "search" and set(call.arguments) == {"query"}


@pytest.mark.parametrize("arguments, fragment", [
    ({}, "missing required argument(s): query"),
    ({"query": 3}, "'query' must be of type string"),
    ({"query": "x", "k": "3"}, "'k' must be of type integer"),
    ({"query": "x", "k": True}, "'k' must be of type integer"),
    ({"query": "x", "nope": 1}, "unknown argument(s): nope"),
    ([1, 2], "must be a JSON object"),
])
def test_validate_says_what_is_wrong(arguments, fragment):
    assert fragment in search.validate(arguments)


def test_validate_accepts_int_for_number_and_null_for_optional():
    assert search.validate({"query": "x", "weight": 2}) is None
    assert search.validate({"query": "x", "tags": None}) is None
    assert "'k' must be of type integer" in search.validate({"query": "x", "k": None})


def _tools(*ts):
    return {t.name: t for t in ts}


def test_run_tool_success_and_json_output():
    @tool
    def pair(a: int) -> list:
        """Two of them.

        Args:
            a: The item.
        """
        return [a, a]

    result = run_tool(_tools(pair), ToolCall("pair", {"a": 2}))
    assert result.ok and result.output == "[2, 2]" and result.arguments == {"a": 2}


def test_run_tool_failures_are_results():
    @tool
    def boom(x: str) -> str:
        """Fails.

        Args:
            x: Anything.
        """
        raise RuntimeError("disk on fire")

    tools = _tools(search, boom)
    unknown = run_tool(tools, ToolCall("serch", {"query": "x"}))
    assert not unknown.ok and "Did you mean 'search'" in unknown.output and "Available tools" in unknown.output
    bad = run_tool(tools, ToolCall("search", {"query": 1}))
    assert not bad.ok and "Call it like: <tool_call>" in bad.output
    raised = run_tool(tools, ToolCall("boom", {"x": "y"}))
    assert not raised.ok and "RuntimeError: disk on fire" in raised.output
    parse_error = run_tool(tools, ToolCall("", {}, "malformed JSON inside <tool_call> (x)"))
    assert not parse_error.ok and "malformed JSON" in parse_error.output and "<tool_call>" in parse_error.output


def test_run_tool_time_limit():
    import threading

    release = threading.Event()

    @tool(timeout_s=0.2)
    def slow(x: str) -> str:
        """Waits.

        Args:
            x: Anything.
        """
        release.wait(5)
        return x

    result = run_tool(_tools(slow), ToolCall("slow", {"x": "a"}), timeout_s=30)
    release.set()
    assert not result.ok and "timed out after 0.2 s" in result.output
