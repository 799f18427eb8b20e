"""The tool-call format end to end: chosen from a chat template, tools rendered by the template's own `tools=`
(or in the format's words when it has none), the env told the policy's format at reset, and a call in a
format the env does not read reported as such. Tokenizers are built here (byte-level BPE, any text round
trips) with hand-written templates in the documented shapes: nothing is downloaded."""
from __future__ import annotations

import pytest

from agentgym.chat import TOOLS_PREAMBLE, ChatFormat
from agentgym.errors import ConfigError
from agentgym.registration import make
from test_chat import qwen_tokenizer, smol_tokenizer, smol_tokenizer_dir  # noqa: F401  (fixtures; same folder)

pytest.importorskip("transformers")

LLAMA31_TEMPLATE = (  # Llama 3.1's shape: tools as JSON in the system turn, calls as {"name", "parameters"}
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{%- if tools %}{{- 'Environment: ipython\\n' }}"
    "{%- endif %}{{- system }}{%- if tools %}"
    "{{- '\\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}. Do not use variables.\\n\\n' }}{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}"
    "{%- endfor %}{%- endif %}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}{%- if message.tool_calls is defined %}{{- '<|start_header_id|>assistant"
    "<|end_header_id|>\\n\\n<|python_tag|>' }}{%- for c in message.tool_calls %}{{- '{\"name\": \"' + "
    "c.function.name + '\", \"parameters\": ' + c.function.arguments | tojson + '}' }}{%- endfor %}"
    "{{- '<|eom_id|>' }}{%- else %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
                  "<|python_tag|>"]

CHATML_TEMPLATE = ("{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                   "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
CHATML_SPECIALS = ["<|im_start|>", "<|im_end|>"]


def byte_tokenizer(template: str, specials: list[str], eos: str, bos: str | None = None):
    """A byte-level BPE tokenizer (no merges: every byte a token) with the template's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos,
                                   additional_special_tokens=specials)
    fast.chat_template = template
    return fast


@pytest.fixture(scope="module")
def llama_chat():
    tok = byte_tokenizer(LLAMA31_TEMPLATE, LLAMA_SPECIALS, "<|eot_id|>", bos="<|begin_of_text|>")
    return ChatFormat.from_tokenizer(tok)


def calculator():
    return make("agentgym/Toy-Calculator-v0").unwrapped


def test_llama_template_is_detected_and_renders_the_tools_itself(llama_chat):
    env = calculator()
    assert llama_chat.tool_format == "llama3" and llama_chat.supports_tools
    ids = llama_chat.initial_prompt(env.instructions, "What is 2 + 3?", env.tools)
    text = llama_chat.decode(ids)
    assert "Environment: ipython" in text and '"name": "calculate"' in text and '"parameters"' in text
    assert "<tool_call>" not in text  # the template's own tool section, not our Hermes fallback
    messages = llama_chat.initial_messages(env.instructions, "What is 2 + 3?", env.tools)
    llama_chat.verify(ids, messages, env.tools)  # the token ids are the template's own tokenisation


def test_real_templates_smollm2_and_qwen25_speak_hermes(smol_tokenizer, qwen_tokenizer):  # noqa: F811
    """SmolLM2's own template (from its GGUF) has no tool support: Hermes in the system text; the Qwen2.5-shaped
    template renders the tools itself and is detected as Hermes from its <tool_call> instructions."""
    env = calculator()
    smol = ChatFormat.from_tokenizer(smol_tokenizer)
    assert smol.tool_format == "hermes" and not smol.supports_tools
    assert "<tool_call></tool_call> XML tags" in smol.decode(smol.initial_prompt("Solve.", "2+3?", env.tools))
    qwen = ChatFormat.from_tokenizer(qwen_tokenizer)
    assert qwen.tool_format == "hermes" and qwen.supports_tools


def test_a_template_without_tools_gets_the_format_s_own_words():
    tok = byte_tokenizer(CHATML_TEMPLATE, CHATML_SPECIALS, "<|im_end|>")
    env = calculator()
    hermes = ChatFormat.from_tokenizer(tok)
    assert hermes.tool_format == "hermes" and not hermes.supports_tools
    assert "<tool_call></tool_call> XML tags" in hermes.system_text("Solve it.", env.tools)
    assert hermes.system_text("Solve it.", env.tools).startswith("Solve it." + TOOLS_PREAMBLE[:20])
    coder = ChatFormat.from_tokenizer(tok, tool_format="qwen3_coder")
    text = coder.decode(coder.initial_prompt("Solve it.", "What is 2 + 3?", env.tools))
    assert "<function=calculate>\n<parameter=expression>" in text and '"name": "calculate"' in text
    with pytest.raises(ConfigError, match="unknown tool-call format 'qwen'"):
        ChatFormat.from_tokenizer(tok, tool_format="qwen")


def test_the_env_reads_the_format_it_is_told_at_reset():
    env = calculator()
    env.reset(seed=0, options={"tool_format": "llama3"})
    obs, _, _, _, info = env.step('<|python_tag|>{"name": "calculate", "parameters": {"expression": "6 * 7"}}')
    assert obs == "<tool_response>\n42\n</tool_response>" and info["tool_format"] == "llama3"
    assert "unparsed_tool_call" not in info
    assert '{"name": "calculate", "parameters": {"expression": "<string>"}}' in env.call_hint()  # for instructions
    obs, *_ = env.step('<tool_call>{"name": "calculate", "arguments": {"expression": "1 + 1"}}</tool_call>')
    assert "2" in obs  # the class's own formats stay as fallbacks
    obs, _, _, _, info = env.step('{"name": "calculate", "parameters": {"expression": 3}}')
    assert 'Call it like: {"name": "calculate", "parameters": {"expression": "<string>"}}' in obs  # its own format
    env.reset(seed=0)  # a reset without the option: the class's own formats again
    assert env.active_tool_formats == ("hermes", "openai")
    with pytest.raises(ConfigError, match="did you mean 'harmony'"):
        env.reset(seed=0, options={"tool_format": "harmon"})


def test_a_call_in_another_format_is_reported_not_silently_ignored():
    env = calculator()
    env.reset(seed=0)  # the class default: Hermes, then bare OpenAI JSON
    obs, _, _, _, info = env.step('[TOOL_CALLS]calculate[ARGS]{"expression": "6 * 7"}')
    assert info["unparsed_tool_call"] == "mistral_v11" and info["tool_format"] == "hermes" and not info["valid_action"]
    assert "looks like a tool call in the mistral_v11 format" in obs and "this env reads hermes, openai" in obs
    assert '<tool_call>{"name": "calculate"' in obs
    obs, _, _, _, info = env.step("I think it is 42.")
    assert "unparsed_tool_call" not in info and obs.startswith("No tool call found.")


def _llama_writer(ctx):
    return '<|python_tag|>{"name": "calculate", "parameters": {"expression": "2 + 2"}}'


@pytest.mark.parametrize("fmt, unparsed", [("hermes", 1.0), ("llama3", 0.0)])
def test_rollout_tells_the_env_the_policy_s_format(fmt, unparsed):
    """A policy writing Llama 3 calls: read when the chat format says llama3, never when it says hermes."""
    from agentgym.policies.scripted import ScriptedPolicy
    from agentgym.engine.rollout import RolloutConfig, rollout
    from agentgym.train.metrics import tool_call_stats

    chat = ChatFormat.simple(tool_format=fmt)
    trajs = rollout("agentgym/Toy-Calculator-v0", ScriptedPolicy(_llama_writer, chat), chat, [0, 1], 2,
                    RolloutConfig(max_turns=2, executor="serial"))
    stats = tool_call_stats([t for tr in trajs for t in tr.turns])
    assert stats["tool_calls_unparsed"] == unparsed and stats[f"tool_format/{fmt}"] == 1.0
    if unparsed:
        assert stats["tool_calls_unparsed/llama3"] == 1.0 and all(t.tool_calls == 0 for tr in trajs for t in tr.turns)
    else:
        assert all(t.tool_calls == 1 and t.tool_errors == 0 for tr in trajs for t in tr.turns)


# ------------------------------------------------------------------------------------------------ agentgym info
def tiny_model_dir(path, template: str, specials: list[str], eos: str, bos: str | None = None):
    """A one-layer random Llama saved with a byte-level tokenizer and `template`: a real `hf:DIR` policy."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = byte_tokenizer(template, specials, eos, bos)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                         pad_token_id=0, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


def test_info_shows_the_prompt_in_the_model_s_own_format(tmp_path, capsys):
    from agentgym.cli import main

    llama = tiny_model_dir(tmp_path / "llama", LLAMA31_TEMPLATE, LLAMA_SPECIALS, "<|eot_id|>", "<|begin_of_text|>")
    assert main(["info", "agentgym/Toy-Calculator-v0", "--policy", f"hf:{llama}", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "tool-call format llama3, from the chat template; tools rendered by the chat template's own tools=" in out
    assert "  | Environment: ipython" in out and '"parameters"' in out and "What is" in out
    assert 'a tool call in the llama3 format' in out
    assert '{"name": "calculate", "parameters": {"expression": "<string>"}}' in out

    chatml = tiny_model_dir(tmp_path / "chatml", CHATML_TEMPLATE, CHATML_SPECIALS, "<|im_end|>")
    assert main(["info", "agentgym/Toy-Calculator-v0", "--policy", f"hf:{chatml}", "--tool-format", "qwen3_coder"]) == 0
    out = capsys.readouterr().out
    assert "tool-call format qwen3_coder; tools rendered in the system text, in the qwen3_coder format's words" in out
    assert "  | <function=calculate>" in out and "<|im_start|>user" in out


def test_info_prompt_options_need_a_policy(capsys):
    from agentgym.cli import main

    assert main(["info", "agentgym/Toy-Calculator-v0", "--tool-format", "llama3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgym info: error: --tool-format and --seed choose the prompt") and err.count("\n") == 1


@pytest.mark.parametrize("fmt", ["mistral_v11", "harmony", "llama3"])
def test_oracle_calls_are_written_in_the_env_s_format(fmt):
    from agentgym.toolcall_formats import looks_like_call

    env = make("agentgym/Search-1Hop-v0")
    try:
        env.reset(seed=0, options={"tool_format": fmt})
        for _ in range(4):
            action = env.unwrapped.oracle_action()
            assert looks_like_call(action) == fmt, action
            _, _, terminated, _, info = env.step(action)
            assert info["valid_action"] and info["tool_results"][0].ok
            if terminated:
                break
        assert info["success"]
    finally:
        env.close()
