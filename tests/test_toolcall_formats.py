"""Tool-call formats of each model family: hand-written transcripts in the documented shapes (several calls per
turn, nested JSON, quotes, unicode), round trips where a format renders calls, detection from chat templates,
and fuzzing: no format raises on any string, and malformed calls become calls whose error says what to do."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.toolcall_formats import FORMATS, ToolCall, detect_format, get_format, looks_like_call
from agentgym.errors import ConfigError

NESTED = {"query": 'say "hi" — 東京 \\ ok', "filters": {"tags": ["a", {"b": [1, 2.5, None, True]}]}, "k": 3}
SCHEMAS = {"search": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"},
                                                         "filters": {"type": "object"}, "exact": {"type": "boolean"},
                                                         "ratio": {"type": "number"}}},
           "get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}}


def parse(fmt: str, text: str):
    return get_format(fmt).parse(text, SCHEMAS)


# ------------------------------------------------------------------------------------------------ real shapes
def test_llama3_python_tag_semicolons_and_end_tokens():
    text = ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "San Francisco"}}; '
            '{"name": "search", "parameters": {"query": "\\"quoted\\" ünïcode", "k": 2}}<|eom_id|>')
    assert parse("llama3", text) == [ToolCall("get_weather", {"city": "San Francisco"}),
                                     ToolCall("search", {"query": '"quoted" ünïcode', "k": 2})]


def test_llama3_untagged_json_and_prose():
    assert parse("llama3", '{"name": "search", "parameters": {"query": "x"}}') == [ToolCall("search", {"query": "x"})]
    assert parse("llama3", "The answer is {probably} 4.") == []
    assert parse("llama3", '{"answer": 4}') == []
    (bad,) = parse("llama3", "<|python_tag|>brave_search.call(query='x')")
    assert bad.error and '"parameters"' in bad.error


def test_mistral_json_list_with_and_without_ids():
    text = ('[TOOL_CALLS] [{"name": "search", "arguments": {"query": "a", "k": 1}, "id": "Ab3dE6gH9"}, '
            '{"name": "get_weather", "arguments": {"city": "Zürich"}}]</s>')
    assert parse("mistral", text) == [ToolCall("search", {"query": "a", "k": 1}), ToolCall("get_weather",
                                                                                          {"city": "Zürich"})]


def test_mistral_v11_name_args_form_several_calls():
    text = ('[TOOL_CALLS]search[ARGS]{"query": "a \\"b\\"", "filters": {"x": [1, {"y": 2}]}}'
            '[TOOL_CALLS]get_weather[CALL_ID]c0ffee123[ARGS]{"city": "Paris"}')
    assert parse("mistral_v11", text) == [ToolCall("search", {"query": 'a "b"', "filters": {"x": [1, {"y": 2}]}}),
                                          ToolCall("get_weather", {"city": "Paris"})]
    (bad,) = parse("mistral", "[TOOL_CALLS]search[ARGS]{oops")
    assert bad.name == "search" and "not valid JSON" in bad.error


def test_qwen3_coder_xml_typed_by_schema():
    text = ("I'll look it up.\n<tool_call>\n<function=search>\n<parameter=query>\nline one\n  indented \"q\" 東京\n"
            "</parameter>\n<parameter=k>\n7\n</parameter>\n<parameter=filters>\n{\"tags\": [\"a\"]}\n</parameter>\n"
            "<parameter=exact>\nTrue\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n</function>\n</tool_call>\n"
            "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n</function>\n</tool_call>")
    first, second = parse("qwen3_coder", text)
    assert first == ToolCall("search", {"query": 'line one\n  indented "q" 東京', "k": 7, "filters": {"tags": ["a"]},
                                        "exact": True, "ratio": 0.5})
    assert second == ToolCall("get_weather", {"city": "42"})  # a string parameter stays a string


def test_qwen3_coder_without_schema_decodes_json_looking_values():
    (call,) = get_format("qwen3_coder").parse("<function=f>\n<parameter=n>\n3\n</parameter>\n"
                                              "<parameter=s>\nhello\n</parameter>\n</function>", None)
    assert call == ToolCall("f", {"n": 3, "s": "hello"})
    (bad,) = parse("qwen3_coder", "<tool_call><function=\n</tool_call>")
    assert bad.error and "<function=NAME>" in bad.error


def test_deepseek_v3_fenced_json_several_calls():
    text = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
            '{"city": "Tokyo"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n'
            '{"query": "x", "filters": {"a": {"b": []}}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>')
    assert parse("deepseek_v3", text) == [ToolCall("get_weather", {"city": "Tokyo"}),
                                          ToolCall("search", {"query": "x", "filters": {"a": {"b": []}}})]


def test_deepseek_v31_shape():
    text = ('<think>need weather</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>'
            '{"city": "北京"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"query": "q"}'
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    assert parse("deepseek_v31", text) == [ToolCall("get_weather", {"city": "北京"}), ToolCall("search", {"query": "q"})]
    (bad,) = parse("deepseek_v31", "<｜tool▁call▁begin｜>get_weather{}<｜tool▁call▁end｜>")
    assert "<｜tool▁sep｜>" in bad.error


def test_harmony_commentary_calls():
    text = ("<|channel|>analysis<|message|>User wants weather; call the tool.<|end|>"
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
            '<|message|>{"city":"San Francisco"}<|call|>')
    assert parse("harmony", text) == [ToolCall("get_weather", {"city": "San Francisco"})]
    header_form = ('<|start|>assistant to=functions.search<|channel|>commentary json<|message|>'
                   '{"query": "x \\"y\\"", "k": 1}<|call|>')
    assert parse("harmony", header_form) == [ToolCall("search", {"query": 'x "y"', "k": 1})]
    (bad,) = parse("harmony", "<|channel|>commentary to=functions.search<|message|>{nope<|call|>")
    assert bad.name == "search" and "not valid JSON" in bad.error


def test_kimi_k2_section():
    text = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
            '{"city": "Beijing"}<|tool_call_end|><|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>'
            '{"query": "日本", "k": 2}<|tool_call_end|><|tool_calls_section_end|>')
    assert parse("kimi_k2", text) == [ToolCall("get_weather", {"city": "Beijing"}),
                                      ToolCall("search", {"query": "日本", "k": 2})]


def test_glm45_arg_key_value_typed_by_schema():
    text = ("<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>a <b> \"c\"</arg_value>\n<arg_key>k</arg_key>\n"
            "<arg_value>5</arg_value>\n</tool_call><tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Köln"
            "</arg_value>\n</tool_call>")
    assert parse("glm45", text) == [ToolCall("search", {"query": 'a <b> "c"', "k": 5}),
                                    ToolCall("get_weather", {"city": "Köln"})]
    (bad,) = parse("glm45", "<tool_call>search\n<arg_key>query</arg_key>no value</tool_call>")
    assert bad.error and "<arg_value>" in bad.error


def test_granite_and_phi4_mini():
    text = '<|tool_call|>[{"name": "search", "arguments": {"query": "x"}}, {"name": "get_weather", "arguments": {}}]'
    assert parse("granite", text) == [ToolCall("search", {"query": "x"}), ToolCall("get_weather", {})]
    phi = '<|tool_call|>[{"name": "search", "arguments": {"query": "y"}}]<|/tool_call|>'
    assert parse("granite", phi) == [ToolCall("search", {"query": "y"})]


def test_hermes_and_openai_kept():
    assert parse("hermes", '<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>') == [
        ToolCall("search", {"query": "q"})]
    assert parse("openai", '{"tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}') == [ToolCall("f")]


# ------------------------------------------------------------------------------------------------ round trips
RENDERED = [ToolCall("search", NESTED), ToolCall("get_weather", {"city": "São Paulo"}), ToolCall("noargs", {})]


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize("call", RENDERED, ids=lambda c: c.name)
def test_every_format_parses_what_it_renders(name, call):
    fmt = FORMATS[name]
    text = fmt.render_call(call)
    parsed = fmt.parse(text, SCHEMAS)
    assert parsed == [call], text
    assert fmt.looks_like(text) and looks_like_call(text) is not None


@pytest.mark.parametrize("name", list(FORMATS))
def test_several_rendered_calls_in_one_turn(name):
    fmt = FORMATS[name]
    assert fmt.parse(fmt.render_calls(RENDERED), SCHEMAS) == RENDERED
    if name not in ("openai", "llama3"):  # these two are the whole reply: no prose before the calls
        assert fmt.parse("Let me do both.\n" + fmt.render_calls(RENDERED[:2]), SCHEMAS) == RENDERED[:2]


def test_each_call_shape_is_recognised_as_its_own_family():
    expect = {"harmony": "harmony", "kimi_k2": "kimi_k2", "deepseek_v3": "deepseek_v3", "deepseek_v31": "deepseek_v3",
              "mistral_v11": "mistral_v11", "mistral": "mistral_v11", "granite": "granite",
              "qwen3_coder": "qwen3_coder", "glm45": "glm45", "hermes": "hermes", "llama3": "llama3",
              "openai": "openai"}
    for name, looks in expect.items():  # the two DeepSeek (and Mistral) shapes share one detector
        assert looks_like_call(FORMATS[name].render_call(RENDERED[0])) == looks, name
    assert looks_like_call("I think the answer is 4.") is None


# ------------------------------------------------------------------------------------------------ detection
TEMPLATES = {
    "hermes": "{%- if tools %}<tools>{{ tools | tojson }}</tools> <tool_call>{% endif %}<|im_start|>",
    "llama3": "<|start_header_id|>{{ role }}<|end_header_id|>{% if tools %}\"parameters\"{% endif %}<|python_tag|>",
    "mistral": "[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS][INST]{{ m }}[/INST][TOOL_CALLS]{{ calls }}",
    "mistral_v11": "[SYSTEM_PROMPT]{{s}}[TOOL_CALLS]{{ call.name }}[ARGS]{{ call.arguments|tojson }}",
    "qwen3_coder": "<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>\n{{ v }}\n</parameter>",
    "glm45": "<tool_call>{{ name }}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value></tool_call>",
    "deepseek_v3": "<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + name + '\\n```json\\n'",
    "deepseek_v31": "<｜tool▁call▁begin｜>' + tool['function']['name'] + '<｜tool▁sep｜>' + arguments",
    "kimi_k2": "<|tool_calls_section_begin|>{% for c in calls %}<|tool_call_begin|>{{ c.id }}",
    "harmony": "<|start|>assistant<|channel|>commentary to=functions.{{ name }}<|message|>{{ args }}<|call|>",
    "granite": "<|start_of_role|>assistant<|end_of_role|><|tool_call|>{{ calls | tojson }}",
}


@pytest.mark.parametrize("expected", list(TEMPLATES))
def test_detect_format_from_chat_templates(expected):
    assert detect_format(TEMPLATES[expected]) == expected


def test_detect_defaults_and_special_tokens():
    assert detect_format("<|im_start|>{{ m.content }}<|im_end|>") == "hermes"  # a template with no call marker
    assert detect_format(None) == "hermes"
    assert detect_format("{{ messages }}", ["<|tool_call|>"]) == "granite"


def test_unknown_format_is_a_config_error_with_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'llama3'"):
        get_format("lama3")


# ------------------------------------------------------------------------------------------------ fuzzing
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF)
PIECES = ["<tool_call>", "</tool_call>", "<function=", "<parameter=", "</parameter>", "</function>", ">", "<arg_key>",
          "</arg_key>", "<arg_value>", "</arg_value>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>", ";",
          "<|tool_call|>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
          "function", "```json", "```", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.f:0",
          "<|tool_call_argument_begin|>", "<|tool_call_end|>", "to=functions.", "<|channel|>", "<|message|>",
          "<|call|>", "<|constrain|>json", "{", "}", "[", "]", '"name"', '"parameters"', '"arguments"', ":", ",",
          '"', "\\", "\n", " ", "f", '{"name": "f", "parameters": {"x": 1}}', "1e999", "null"]
ADVERSARIAL = st.one_of(
    st.text(alphabet=ANY_CHAR, max_size=200),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(alphabet=ANY_CHAR, max_size=6)), max_size=40).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(ADVERSARIAL)
def test_no_format_raises_and_errors_say_something(text):
    for name, fmt in FORMATS.items():
        for schemas in (None, SCHEMAS):
            calls = fmt.parse(text, schemas)
            assert isinstance(calls, list), name
            for call in calls:
                assert isinstance(call, ToolCall) and isinstance(call.arguments, dict), name
                assert call.error is not None or call.name, f"{name}: a call without error must have a name"
                assert call.error is None or len(call.error) > 10
        assert isinstance(fmt.looks_like(text), bool)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("piece", ["<function=", "<｜tool▁call▁begin｜>", "to=functions.f", "<|tool_call_begin|>",
                                   "[TOOL_CALLS]a[ARGS]", "<tool_call>", "<|tool_call|>", "<parameter=", "{" * 3])
def test_repeated_openers_stay_fast(piece):
    text = piece * (200_000 // len(piece))
    for fmt in FORMATS.values():
        fmt.parse(text, SCHEMAS)


@settings(max_examples=60, deadline=None)
@given(ADVERSARIAL, st.sampled_from(sorted(FORMATS)))
def test_a_tool_env_answers_any_string_in_any_format(text, name):
    """Whatever the model writes, in whichever format the env was told: an observation, never an exception."""
    from agentgym.registration import make

    env = make("agentgym/Toy-Calculator-v0")
    try:
        env.reset(seed=0, options={"tool_format": name})
        obs, reward, _, _, info = env.step(text)
        assert isinstance(obs, str) and obs and isinstance(reward, float) and info["tool_format"] == name
        if "unparsed_tool_call" in info:
            assert info["unparsed_tool_call"] in FORMATS and not info["valid_action"] and "looks like" in obs
    finally:
        env.close()
