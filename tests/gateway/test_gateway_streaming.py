"""Token-by-token streaming (issue 54): a streamed call reaches the official `openai` client one token at a
time while the engine is still generating it, adds up to exactly what the gateway recorded, ends with the
engine's token ids and the usage; an error before the first token keeps its OpenAI status, and a reader that
goes away mid-stream loses only that call."""
from __future__ import annotations

import time

import httpx
import pytest

openai = pytest.importorskip("openai")
MESSAGES = [{"role": "user", "content": "room 0 . key here ."}]


def client_for(url: str, key: str) -> "openai.OpenAI":
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0)


@pytest.fixture()
def slow_policy(tiny_model_dir):
    """The tiny model behind the hf policy, 0.15 s per sampled token: slow enough to see a stream arrive
    while the call is still generating."""
    from agentgym.policies.hf import HFPolicy
    from agentgym.policy import load_policy

    class Slow(HFPolicy):
        def _sample(self, rows, logits):
            time.sleep(0.15)
            return super()._sample(rows, logits)

    base = load_policy(f"hf:{tiny_model_dir}")
    policy = Slow(base.model, base.tokenizer)
    return policy, base.chat_format()


def test_a_streamed_call_arrives_token_by_token_while_it_is_generated(slow_policy, serve):
    policy, chat = slow_policy
    gateway, url = serve(policy, chat, max_new_tokens=6)
    session = gateway.open_session()
    stream = client_for(url, session.id).chat.completions.create(
        model="m", messages=MESSAGES, max_tokens=6, temperature=1.0, seed=3, stream=True, logprobs=True,
        stream_options={"include_usage": True})
    chunks, recorded_when_first_text_came = [], None
    for chunk in stream:
        chunks.append(chunk)
        if recorded_when_first_text_came is None and chunk.choices and chunk.choices[0].delta.content:
            recorded_when_first_text_came = len(gateway.session(session.id).calls)
    (call,) = gateway.session(session.id).calls
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert recorded_when_first_text_came == 0   # the first text came before the call had finished
    assert "".join(texts) == call.text and len(texts) >= min(3, len(call.completion_ids) - 1), (texts, call)
    assert len({c.id for c in chunks}) == 1 and chunks[0].choices[0].delta.role == "assistant"
    last = [c for c in chunks if c.choices][-1]
    assert last.choices[0].finish_reason == call.finish_reason
    assert last.choices[0].model_extra["token_ids"] == list(call.completion_ids)
    assert [t.logprob for t in last.choices[0].logprobs.content] == pytest.approx(list(call.logprobs))
    assert chunks[-1].usage.completion_tokens == len(call.completion_ids)
    plain = client_for(url, gateway.open_session().id).chat.completions.create(   # the same seed, not streamed
        model="m", messages=MESSAGES, max_tokens=6, temperature=1.0, seed=3)
    assert plain.choices[0].message.content == call.text


def test_an_error_before_the_first_token_keeps_its_status(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=4)
    with pytest.raises(openai.AuthenticationError):
        client_for(url, "gw-nobody").chat.completions.create(model="m", messages=MESSAGES, stream=True)
    session = gateway.open_session()
    gateway.close_session(session.id)
    with pytest.raises(openai.ConflictError):
        client_for(url, session.id).chat.completions.create(model="m", messages=MESSAGES, stream=True)


def test_a_reader_gone_mid_stream_loses_only_that_call(slow_policy, serve):
    policy, chat = slow_policy
    gateway, url = serve(policy, chat, max_new_tokens=40)
    session = gateway.open_session()
    # seeded: an unseeded sample could end (or decode to no text) before the hang-up, and then be recorded
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 40, "temperature": 1.0, "seed": 3, "stream": True}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {session.id}"}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if '"content": "' in line and '"content": ""' not in line:
                break   # the first text: hang up
    deadline = time.monotonic() + 10
    while gateway.session(session.id).lost_calls == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gateway.session(session.id).lost_calls == 1 and not gateway.session(session.id).calls
    again = client_for(url, session.id).chat.completions.create(model="m", messages=MESSAGES, max_tokens=2,
                                                                stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in again if c.choices) == \
        gateway.session(session.id).calls[0].text


def test_text_deltas_by_hand():
    from agentgym.train.gateway.protocol import TextDeltas

    words = {1: "take", 2: " the", 3: " key", 9: "</s>", 7: "\ufffd"}
    deltas = TextDeltas(lambda ids: "".join(words[i] for i in ids))
    assert [deltas.push(t) for t in (1, 2, 3, 9)] == ["", "take", " the", " key"]   # one token behind
    assert deltas.rest("take the key") == ""   # the end-of-turn token is not text
    cut = TextDeltas(lambda ids: "".join(words[i] for i in ids))
    assert [cut.push(t) for t in (1, 7, 2)] == ["", "take", ""] and cut.rest("take\ufffd the") == "\ufffd the"
