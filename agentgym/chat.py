"""Chat formats: turn a conversation into token ids incrementally, never re-tokenizing generated ids.

    chat = ChatFormat.from_tokenizer(tokenizer)      # the tokenizer's own chat template
    chat = ChatFormat.simple()                       # byte-level ids, ChatML-like, no transformers

    ids = chat.initial_prompt(env.instructions, first_obs, env.tools)
    ids = chat.continue_prompt(ids, generated_ids, next_obs)   # prompt + generated + delimiters/obs

Tools: a template that renders `tools=` itself (most tool-trained models' templates) gets the schemas that
way; otherwise they are appended to the system text in the chat format's `tool_format` (agentgym.toolcall_formats),
which is detected from the template and its special tokens unless given (`from_tokenizer(tok, tool_format=...)`).

Delimiters come from rendering the template itself (with sentinel contents), so every template the
tokenizer ships works without a hand-written table. `verify` proves a token list equals the
tokenization of the rendered conversation, splicing in the generated ids where they are known.

End of turn: when a generation stops without emitting the template's end-of-turn token (stop string,
max tokens, or another eos token), `continue_prompt` appends the full end-of-turn delimiter before the
next user turn, so the sequence stays a well-formed conversation. Those delimiter tokens belong to the
next prompt (masked out of the loss), never to the response. When the response does end with the
end-of-turn token, that token is not repeated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from agentgym.errors import ConfigError, TokenMismatchError
from agentgym.toolcall_formats import DEFAULT_FORMAT, detect_from_tokenizer, get_format
from agentgym.toolcall_formats.json_formats import HERMES_TOOLS_PROMPT

_ASSIST = "\uE000agentgym-assistant-{}\uE001"  # private-use chars: never in real text, survive trim()
_PROBE_SYSTEM, _PROBE_USER = "S", "U"
TRUNCATION_MARKER = "…[truncated {} tokens]"

TOOLS_PREAMBLE = HERMES_TOOLS_PROMPT  # the Hermes tool section, for templates that cannot render `tools=`


def tool_schemas(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """OpenAI function schemas from `Tool`s or schema dicts."""
    return [t if isinstance(t, dict) else t.schema for t in (tools or ())]


@dataclass(frozen=True)
class Mismatch:
    """Where two token lists first differ, with decoded context on both sides."""

    position: int
    expected_len: int
    actual_len: int
    expected_context: str
    actual_context: str

    def __str__(self) -> str:
        return (f"token mismatch at position {self.position} (expected {self.expected_len} tokens, got "
                f"{self.actual_len}):\n  expected ...{self.expected_context!r}\n  actual   ...{self.actual_context!r}")


def first_mismatch(expected: Sequence[Any], actual: Sequence[Any]) -> int | None:
    """Index of the first differing token (or character: any two sequences), or the shorter length; None when
    equal."""
    for i, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            return i
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


class ChatFormat:
    """Base class: subclasses provide `render`, `encode`, `decode` and the special ids."""

    name = "chat"
    eos_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    special_ids: frozenset[int] = frozenset()
    supports_tools = False  # the template renders `tools` itself; otherwise we fold them into the system text
    tool_format = DEFAULT_FORMAT  # how this model writes tool calls (a name in agentgym.toolcall_formats.FORMATS)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def simple(cls, tool_format: str | None = None) -> ChatFormat:
        """Byte-level ids with a ChatML template; needs no transformers (scripted/random/oracle policies)."""
        return SimpleChatFormat(tool_format)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, tool_format: str | None = None) -> ChatFormat:
        """The tokenizer's own chat template; delimiters are found by rendering it. `tool_format` None or
        "auto": the tool-call format the template speaks (`detect_format`)."""
        return HFChatFormat(tokenizer, tool_format)

    def with_tool_format(self, tool_format: str) -> ChatFormat:
        """A copy speaking `tool_format` (a `FORMATS` name; "auto" keeps this one's)."""
        import copy

        chosen = copy.copy(self)
        chosen.tool_format = _chosen_format(tool_format, None) or self.tool_format
        return chosen

    # ------------------------------------------------------------------ for subclasses
    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               add_generation_prompt: bool) -> str:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ conversation pieces
    def system_text(self, system: str, tools: Sequence[Any] | None = None) -> str:
        """The system message; tool schemas are appended when the template does not render them."""
        schemas = tool_schemas(tools)
        if schemas and not self.supports_tools:
            return (system or "") + get_format(self.tool_format).prompt(schemas)
        return system or ""

    def initial_messages(self, system: str, first_obs: str, tools: Sequence[Any] | None = None
                         ) -> list[dict[str, Any]]:
        text = self.system_text(system, tools)
        head = [{"role": "system", "content": text}] if text else []
        return head + [{"role": "user", "content": first_obs}]

    def _tools_arg(self, tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
        schemas = tool_schemas(tools)
        return schemas if schemas and self.supports_tools else None

    def initial_prompt(self, system: str, first_obs: str, tools: Sequence[Any] | None = None) -> list[int]:
        """System (+ tools) and the first observation, ending with the assistant generation prompt."""
        return self.encode(self.render(self.initial_messages(system, first_obs, tools), self._tools_arg(tools),
                                       add_generation_prompt=True))

    def turn_suffix(self, response_ids: Sequence[int], observation: str) -> list[int]:
        """Ids that follow a response: end-of-turn delimiter, the user turn with `observation`, gen prompt."""
        probe = [{"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": _PROBE_USER},
                 {"role": "assistant", "content": _ASSIST.format(0)}, {"role": "user", "content": observation}]
        text = self.render(probe, None, add_generation_prompt=True)
        suffix = self.encode(text.split(_ASSIST.format(0), 1)[1])
        if response_ids and suffix and response_ids[-1] == suffix[0] and suffix[0] in self.special_ids:
            return suffix[1:]  # the model already emitted the end-of-turn token
        return suffix

    def continue_prompt(self, prompt_ids: Sequence[int], response_ids: Sequence[int], observation: str
                        ) -> list[int]:
        """Previous prompt + generated ids (as they are) + the next user turn and generation prompt."""
        return [*prompt_ids, *response_ids, *self.turn_suffix(response_ids, observation)]

    def content_ids(self, response_ids: Sequence[int]) -> list[int]:
        """A response without its trailing end-of-turn token (what the template renders as content)."""
        end = self.end_of_turn_id
        ids = list(response_ids)
        return ids[:-1] if ids and end is not None and ids[-1] == end else ids

    @property
    def end_of_turn_id(self) -> int | None:
        """The special token that closes an assistant turn in this template, if there is one."""
        if not hasattr(self, "_end_of_turn"):
            first = self.turn_suffix((), "x")[:1]
            self._end_of_turn = first[0] if first and first[0] in self.special_ids else None
        return self._end_of_turn

    def truncate_observation(self, observation: str, max_tokens: int | None) -> str:
        """At most `max_tokens` tokens of the observation, then a visible marker saying how many were cut."""
        if max_tokens is None:
            return observation
        ids = self.encode(observation)
        if len(ids) <= max_tokens:
            return observation
        return self.decode(ids[:max_tokens]) + TRUNCATION_MARKER.format(len(ids) - max_tokens)

    # ------------------------------------------------------------------ verification
    def expected_ids(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None = None,
                     add_generation_prompt: bool = True) -> list[int]:
        """The tokenization of the rendered conversation. Assistant messages carrying `token_ids` keep
        those ids (generated ids are never re-tokenized); the template text around them is tokenized."""
        marked, spliced = [], []
        for m in messages:
            if m.get("role") == "assistant" and m.get("token_ids") is not None:
                marked.append({"role": "assistant", "content": _ASSIST.format(len(spliced))})
                spliced.append(self.content_ids(m["token_ids"]))
            else:
                marked.append({k: v for k, v in m.items() if k != "token_ids"})
        text = self.render(marked, self._tools_arg(tools), add_generation_prompt)
        ids: list[int] = []
        for i, content in enumerate(spliced):
            before, sep, text = text.partition(_ASSIST.format(i))
            if not sep:
                raise TokenMismatchError(f"the chat template dropped assistant message {i}; cannot verify")
            ids += self.encode(before) + content
        return ids + self.encode(text)

    def verify(self, prompt_ids: Sequence[int], messages: Sequence[dict[str, Any]],
               tools: Sequence[Any] | None = None, add_generation_prompt: bool = True) -> None:
        """Raise `TokenMismatchError` (first differing position, decoded context) unless equal."""
        expected = self.expected_ids(messages, tools, add_generation_prompt)
        pos = first_mismatch(expected, list(prompt_ids))
        if pos is not None:
            lo = max(0, pos - 8)
            raise TokenMismatchError(str(Mismatch(pos, len(expected), len(prompt_ids),
                                                  self.decode(expected[lo:pos + 8]),
                                                  self.decode(list(prompt_ids)[lo:pos + 8]))))

    def trajectory_messages(self, trajectory: Any, tools: Sequence[Any] | None = None
                            ) -> list[dict[str, Any]]:
        """Messages of a recorded `trajectory`-layout episode up to its last prompt (for `verify`)."""
        turns = trajectory.turns
        messages = self.initial_messages(trajectory.system_prompt, turns[0].observation, tools)
        for prev, turn in zip(turns, turns[1:]):
            messages.append({"role": "assistant", "content": prev.action, "token_ids": list(prev.response_ids)})
            messages.append({"role": "user", "content": turn.observation})
        return messages

    def verify_trajectory(self, trajectory: Any, tools: Sequence[Any] | None = None) -> None:
        """Check the last prompt of a `trajectory`-layout episode against its rendered conversation."""
        if trajectory.turns:
            self.verify(trajectory.turns[-1].prompt_ids, self.trajectory_messages(trajectory, tools), tools)


class SimpleChatFormat(ChatFormat):
    """UTF-8 bytes are ids 0-255; `<|im_start|>`, `<|im_end|>`, `<|endoftext|>` are 256-258."""

    name = "simple"
    SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")

    def __init__(self, tool_format: str | None = None) -> None:
        self.tool_format = _chosen_format(tool_format, None) or DEFAULT_FORMAT
        self._special = {s: 256 + i for i, s in enumerate(self.SPECIALS)}
        self._split = re.compile("(" + "|".join(re.escape(s) for s in self.SPECIALS) + ")")
        self.special_ids = frozenset(self._special.values())
        self.eos_token_ids = (self._special["<|im_end|>"], self._special["<|endoftext|>"])
        self.stop_strings = ("<|im_end|>",)
        self.vocab_size = 256 + len(self.SPECIALS)

    def render(self, messages, tools, add_generation_prompt):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def encode(self, text: str) -> list[int]:
        if "<|" not in text:  # fast path: no special tokens
            return list(text.encode("utf-8"))
        ids: list[int] = []
        for part in self._split.split(text):
            special = self._special.get(part)
            if special is not None:
                ids.append(special)
            elif part:
                ids.extend(part.encode("utf-8"))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        out, buf = [], bytearray()
        for i in ids:
            if i < 256:
                buf.append(i)
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            out.append(self.SPECIALS[i - 256] if i - 256 < len(self.SPECIALS) else "")
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)


class HFChatFormat(ChatFormat):
    """A Hugging Face tokenizer and its `chat_template` (ChatML, Llama-3, Qwen, ...)."""

    name = "hf"

    def __init__(self, tokenizer: Any, tool_format: str | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no chat_template; "
                              "set tokenizer.chat_template to a jinja template or use ChatFormat.simple()")
        self.tokenizer = tokenizer
        self.supports_tools = "tools" in tokenizer.chat_template
        self.tool_format = _chosen_format(tool_format, None) or detect_from_tokenizer(tokenizer)
        self.special_ids = frozenset(tokenizer.all_special_ids) | frozenset(
            getattr(tokenizer, "added_tokens_decoder", {}) or {})
        try:
            probe = self.render([{"role": "user", "content": _PROBE_USER},
                                 {"role": "assistant", "content": _ASSIST.format(0)}], None, False)
            if _ASSIST.format(0) not in probe:
                raise ConfigError("the chat template drops assistant message content; it cannot be used for "
                                  "rollouts")
            end = self.end_of_turn_id  # renders a system + user + assistant + user conversation
        except ConfigError:
            raise
        except Exception as exc:  # e.g. a template that rejects system messages
            raise ConfigError(f"the chat template cannot render a system/user/assistant conversation "
                              f"({type(exc).__name__}: {exc}); set tokenizer.chat_template to one that can") from exc
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        self.eos_token_ids = tuple(dict.fromkeys([*eos, *([end] if end is not None else [])]))
        self.stop_strings = tuple(tokenizer.convert_ids_to_tokens(list(self.eos_token_ids)))

    def render(self, messages, tools, add_generation_prompt):
        return self.tokenizer.apply_chat_template(list(messages), tools=tools, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        # the template writes BOS itself where it wants one, so no special tokens are added here
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)


def _chosen_format(name: str | None, auto: str | None) -> str | None:
    """A configured tool-call format checked against the registry; `auto` for None / "auto"."""
    if name is None or name == "auto":
        return auto
    return get_format(name).name
