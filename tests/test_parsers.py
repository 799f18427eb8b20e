"""Tool-call and tag parsers: known formats, and random/adversarial strings that must never raise."""
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.checker import GARBAGE_ACTIONS
from agentgym.tools import PARSERS, ToolCall, extract_tag, parse_hermes, parse_openai_json, parse_tool_calls

ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
PIECES = ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "<action>", "</action>", "{", "}", "[", "]",
          '"name"', '"arguments"', ":", ",", '"', "\\", "```json", "```", "null", "1e999", "\n", " ",
          '{"name": "f", "arguments": {"x": 1}}', '"tool_calls"', '"function"']
# Strings that look like calls: random sequences of the parsers' own syntax, plus any text.
ADVERSARIAL = st.one_of(
    st.text(alphabet=ANY_CHAR, max_size=200),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(alphabet=ANY_CHAR, max_size=8)), max_size=40).map("".join),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.sampled_from([text for _, text in GARBAGE_ACTIONS]),
)


def test_hermes_several_calls_per_turn():
    text = ('I will search.<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>\n'
            '<tool_call>\n{"name": "lookup", "arguments": {"id": 3}}\n</tool_call>')
    assert parse_hermes(text) == [ToolCall("search", {"query": "a"}), ToolCall("lookup", {"id": 3})]


def test_hermes_unterminated_last_block_and_string_arguments():
    text = '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}'
    assert parse_hermes(text) == [ToolCall("f", {"x": 1})]


@pytest.mark.parametrize("body, fragment", [
    ('{"name": "f", "arguments": {', "malformed JSON inside <tool_call>"),
    ('["f"]', "must be a JSON object, got list"),
    ('{"arguments": {}}', 'no "name" string'),
    ('{"name": "f", "arguments": [1]}', '"arguments" must be a JSON object'),
    ('{"name": "f", "arguments": "{bad"}', "the arguments of 'f' are not valid JSON"),
    ("[" * 50_000, "malformed JSON"),
    ('{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}", "malformed JSON"),
])
def test_hermes_errors_are_calls_with_a_message(body, fragment):
    (call,) = parse_hermes(f"<tool_call>{body}</tool_call>")
    assert call.error and fragment in call.error


def test_openai_formats():
    message = {"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                              {"function": {"name": "g", "arguments": ""}}]}
    assert parse_openai_json(json.dumps(message)) == [ToolCall("f", {"x": 1}), ToolCall("g", {})]
    assert parse_openai_json('{"name": "f", "arguments": {"x": 2}}') == [ToolCall("f", {"x": 2})]
    assert parse_openai_json('```json\n{"name": "f", "parameters": {"x": 3}}\n```') == [ToolCall("f", {"x": 3})]
    assert parse_openai_json('[{"name": "a"}, {"name": "b", "arguments": null}]') == [ToolCall("a"), ToolCall("b")]
    assert parse_openai_json("just words") == [] and parse_openai_json('{"answer": 3}') == []
    assert parse_openai_json("{not json") == [] and parse_openai_json("[" * 50_000) == []


def test_parse_tool_calls_order_of_formats():
    hermes = '<tool_call>{"name": "h", "arguments": {}}</tool_call>'
    assert parse_tool_calls(hermes) == [ToolCall("h")]
    assert parse_tool_calls('{"name": "o", "arguments": {}}') == [ToolCall("o")]
    assert parse_tool_calls('{"name": "o"}', formats=("hermes",)) == []
    assert parse_tool_calls("no call here") == []


def test_extract_tag():
    assert extract_tag("<answer> 42 </answer>", "answer") == "42"
    assert extract_tag("<answer>1</answer> then <answer>2</answer>", "answer") == "2"
    assert extract_tag("<answer>\nmulti\nline\n</answer>", "answer") == "multi\nline"
    assert extract_tag("<answer>unclosed", "answer") is None
    assert extract_tag("<action>go</action>", "answer") is None
    assert extract_tag("<answer></answer>", "answer") == ""


@pytest.mark.timeout(20)
def test_extract_tag_is_linear_on_unclosed_tags():
    # The lazy-regex version took ~30 s here (quadratic); the timeout only guards against a hang.
    assert extract_tag("<answer>" * 25_000, "answer") is None


def _reference_extract(text, tag):
    matches = re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.S)
    return matches[-1].strip() if matches else None


@settings(max_examples=150)
@given(st.lists(st.sampled_from(["<answer>", "</answer>", "a", " b ", "<", ">", "/", "\n"]), max_size=20).map("".join))
def test_extract_tag_matches_the_regex_definition(text):
    assert extract_tag(text, "answer") == _reference_extract(text, "answer")


@settings(max_examples=150)
@given(ADVERSARIAL)
def test_no_parser_raises_on_any_string(text):
    for name, parser in PARSERS.items():
        calls = parser(text)
        assert isinstance(calls, list), name
        for call in calls:
            assert isinstance(call, ToolCall) and isinstance(call.arguments, dict)
            assert isinstance(call.name, str) and (call.error is None or isinstance(call.error, str))
            assert call.error is not None or call.name, "a call without error must have a name"
    for tag in ("answer", "action"):
        found = extract_tag(text, tag)
        assert found is None or isinstance(found, str)


@settings(max_examples=100)
@given(ADVERSARIAL)
def test_calls_without_a_tool_call_tag_are_not_hermes(text):
    if "<tool_call>" not in text:
        assert parse_hermes(text) == []


def _calculator_tools():
    from agentgym.envs.toy.calculator import CalculatorEnv

    return {t.name: t for t in CalculatorEnv().tools}


@settings(max_examples=100)
@given(ADVERSARIAL)
def test_parsed_calls_never_crash_run_tool(text):
    from agentgym.tools import run_tool

    tools = _calculator_tools()
    for call in parse_tool_calls(text):
        result = run_tool(tools, call, timeout_s=5)
        assert isinstance(result.output, str) and result.output
        if call.error or call.name not in tools:
            assert not result.ok and result.output.startswith("Error:")
