"""Tools through the gateway with the official client: schemas reach the prompt in the engine's format, the
completion's tool call comes back as OpenAI `tool_calls`, and the harness's echo of it splices the generated
ids back in. The model is a scripted stand-in (the tiny model's word vocabulary cannot write JSON): it
answers fixed texts as byte-level ids of `ChatFormat.simple()`, Hermes tool-call format."""
from __future__ import annotations

import json

import pytest

from agentgym.chat import ChatFormat
from agentgym.policy import Generation
from agentgym.train.gateway import segments

openai = pytest.importorskip("openai")

CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
ADD = {"type": "function", "function": {"name": "add", "description": "add two numbers", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}}


class Scripted:
    """Answers the next text of `script` to each request, as ids with the end-of-turn token and log-probs."""

    def __init__(self, chat: ChatFormat, script: list[str]):
        self.chat, self.script, self.prompts = chat, list(script), []

    def generate(self, requests):
        out = []
        for r in requests:
            self.prompts.append(r.prompt_ids)
            text = self.script.pop(0)
            ids = (*self.chat.encode(text), self.chat.eos_token_ids[0])
            out.append(Generation(ids, text, tuple(-0.25 for _ in ids), "stop"))
        return out


def test_a_tool_call_round_trip_stays_one_token_exact_segment(serve):
    chat = ChatFormat.simple()
    policy = Scripted(chat, [CALL, "the sum is 5"])
    gateway, url = serve(policy, chat, max_new_tokens=64)
    session = gateway.open_session()
    client = openai.OpenAI(base_url=url, api_key=session.id, max_retries=0)
    messages = [{"role": "user", "content": "what is 2 + 3?"}]
    first = client.chat.completions.create(model="m", messages=messages, tools=[ADD])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (tc,) = choice.message.tool_calls
    assert tc.function.name == "add" and json.loads(tc.function.arguments) == {"a": 2, "b": 3}
    prompt_text = chat.decode(policy.prompts[0])
    assert '"name": "add"' in prompt_text and "<tool_call>" in prompt_text   # the engine's tool prompt
    messages += [choice.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": tc.id, "content": "5"}]
    second = client.chat.completions.create(model="m", messages=messages, tools=[ADD])
    assert second.choices[0].message.content == "the sum is 5" and second.choices[0].finish_reason == "stop"
    calls = gateway.session(session.id).calls
    assert calls[0].tool_calls == 1 and calls[1].spliced == 1 and calls[1].retokenized == 0
    assert segments(calls) == [[0, 1]]   # the tool round trip continued the same token sequence
    assert calls[1].prompt_ids[:len(calls[0].prompt_ids) + len(calls[0].completion_ids)] == \
        calls[0].prompt_ids + calls[0].completion_ids
    assert calls[1].observation == "5"


def test_a_tool_call_the_gateway_did_not_generate_is_written_in_the_engines_format(serve):
    chat = ChatFormat.simple()
    policy = Scripted(chat, ["ok", CALL])
    gateway, url = serve(policy, chat, max_new_tokens=64)
    session = gateway.open_session()
    client = openai.OpenAI(base_url=url, api_key=session.id, max_retries=0)
    made_up = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_mine", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}}]}
    client.chat.completions.create(model="m", tools=[ADD], messages=[
        {"role": "user", "content": "1 + 1?"}, made_up, {"role": "tool", "tool_call_id": "call_mine", "content": "2"}])
    assert gateway.session(session.id).calls[0].retokenized == 1
    history = chat.decode(policy.prompts[0]).split("1 + 1?", 1)[1]   # after the user's message: the made-up call
    assert "<tool_call>" in history and '"name": "add"' in history and '"arguments": {"a": 1, "b": 1}' in history
    # tool_choice "none": a completion that looks like a call comes back as text
    answer = client.chat.completions.create(model="m", tools=[ADD], tool_choice="none",
                                            messages=[{"role": "user", "content": "2 + 3?"}])
    assert answer.choices[0].message.content == CALL and not answer.choices[0].message.tool_calls
