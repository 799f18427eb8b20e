"""The gateway's endpoint with the official `openai` client on loopback, in front of the real tiny model:
token-exact recording, merging, sessions, OpenAI-style errors, a caller hanging up, the session bound."""
from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from agentgym.train.gateway import segments, session_trajectory
from agentgym.train.samples import build_samples

openai = pytest.importorskip("openai")

SYSTEM = "take the key , then open the door ."


def client_for(url: str, key: str, **kw) -> "openai.OpenAI":
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0, **kw)


def test_calls_are_recorded_token_exact_and_merge_into_one_sequence(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=4, model="tiny")
    session = gateway.open_session(task="keydoor")
    client = client_for(url, session.id)
    assert [m.id for m in client.models.list()] == ["tiny"]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "room 0 . key here ."}]
    returned = []
    for turn in range(3):
        answer = client.chat.completions.create(model="tiny", messages=messages, max_tokens=3, logprobs=True)
        choice = answer.choices[0]
        returned.append((answer.model_extra["prompt_token_ids"], choice.model_extra["token_ids"],
                         [t.logprob for t in choice.logprobs.content]))
        assert answer.usage.completion_tokens == len(choice.model_extra["token_ids"]) <= 3
        messages += [{"role": "assistant", "content": choice.message.content},
                     {"role": "user", "content": f"room {turn} . hold key ."}]
    # the first prompt is the chat template's own tokenisation of the messages
    first_prompt = chat.tokenizer.apply_chat_template(messages[:2], add_generation_prompt=True, tokenize=False)
    assert returned[0][0] == chat.encode(first_prompt)
    calls = gateway.session(session.id).calls
    for c, (prompt, ids, logprobs) in zip(calls, returned):   # what the engine generated is what was recorded
        assert list(c.prompt_ids) == prompt and list(c.completion_ids) == ids
        assert list(c.logprobs) == pytest.approx(logprobs) and all(lp <= 0 for lp in logprobs)
    assert [c.spliced for c in calls] == [0, 1, 2] and all(c.retokenized == 0 for c in calls)
    for before, after in zip(calls, calls[1:]):   # each prompt extends the previous prompt + completion
        assert after.prompt_ids[:len(before.prompt_ids) + len(before.completion_ids)] == \
            before.prompt_ids + before.completion_ids
    assert segments(calls) == [[0, 1, 2]]
    gateway.close_session(session.id, reward=1.0)
    traj = session_trajectory(gateway.session(session.id), group_id=0, sample_index=0)
    (sample,) = build_samples([traj], "trajectory")
    assert list(sample.ids) == returned[-1][0] + returned[-1][1]
    for c in calls:
        start = len(c.prompt_ids)
        assert list(sample.ids[start:start + len(c.completion_ids)]) == list(c.completion_ids)


def test_an_edited_history_is_tokenised_as_prompt_and_starts_a_new_segment(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=2)
    session = gateway.open_session()
    client = client_for(url, session.id)
    messages = [{"role": "user", "content": "room 0 ."}]
    first = client.chat.completions.create(model="m", messages=messages, max_tokens=2)
    edited = "door " + (first.choices[0].message.content or "")   # the harness changed the model's answer
    client.chat.completions.create(model="m", messages=messages + [{"role": "assistant", "content": edited},
                                                                   {"role": "user", "content": "room 1 ."}],
                                   max_tokens=2)
    calls = gateway.session(session.id).calls
    assert calls[1].retokenized == 1 and calls[1].spliced == 0
    assert segments(calls) == [[0], [1]]


def test_the_session_comes_from_the_header_or_the_api_key(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=2)
    a, b = gateway.open_session(), gateway.open_session()
    by_header = client_for(url, "any-key", default_headers={"X-Session-Id": b.id})
    by_header.chat.completions.create(model="m", messages=[{"role": "user", "content": "room 1 ."}], max_tokens=1)
    assert len(gateway.session(b.id).calls) == 1 and not gateway.session(a.id).calls


def test_streaming_gives_the_same_recorded_answer(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=3)
    session = gateway.open_session()
    stream = client_for(url, session.id).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "room 0 ."}], max_tokens=3, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    (call,) = gateway.session(session.id).calls
    assert text == call.text and chunks[-1].usage.completion_tokens == len(call.completion_ids)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")


def test_openai_style_errors(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=4, max_body_bytes=2000)
    msgs = [{"role": "user", "content": "room 0 ."}]
    with pytest.raises(openai.AuthenticationError) as unknown:
        client_for(url, "gw-nobody").chat.completions.create(model="m", messages=msgs)
    assert unknown.value.code == "unknown_session" and "POST /v1/sessions" in unknown.value.message
    session = gateway.open_session()
    client = client_for(url, session.id)
    bad_tools = [[{"type": "function", "function": {"name": "has space"}}],
                 [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}],
                 [{"type": "function"}], [{"function": {"name": "f"}}]]
    for tools in bad_tools:
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(model="m", messages=msgs, tools=tools)
        assert bad.value.code == "invalid_tools" and bad.value.param.startswith("tools")
    refusals = {"n": 2, "top_logprobs": 3, "presence_penalty": 0.5, "tool_choice": "required", "max_tokens": 99}
    for key, value in refusals.items():
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="m", messages=msgs, **{key: value})
        assert refused.value.param == key
    with pytest.raises(openai.BadRequestError) as unknown_arg:
        client.chat.completions.create(model="m", messages=msgs, extra_body={"best_of": 3})
    assert unknown_arg.value.code == "unknown_parameter"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[{"role": "robot", "content": "x"}])
    with pytest.raises(openai.APIStatusError) as large:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "room " * 1000}])
    assert large.value.status_code == 413 and large.value.code == "request_too_large"
    raw = httpx.post(f"{url}/chat/completions", content=b"{not json", headers={"Authorization": f"Bearer {session.id}"})
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "invalid_json"
    assert not gateway.session(session.id).calls   # nothing refused was recorded
    client.chat.completions.create(model="m", messages=msgs, max_tokens=1)   # the session still works
    closed = httpx.post(f"{url}/sessions/{session.id}/close", json={"reward": 0.5}).json()
    assert closed["status"] == "closed" and closed["reward"] == 0.5 and closed["calls"] == 1
    with pytest.raises(openai.ConflictError) as after_close:
        client.chat.completions.create(model="m", messages=msgs)
    assert after_close.value.code == "session_closed"
    assert httpx.post(f"{url}/sessions/{session.id}/close", json={}).status_code == 409
    missing = httpx.get(f"{url}/nowhere")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert len(gateway.session(session.id).calls) == 1


def test_rewards_per_session_and_per_call(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=1)
    sid = httpx.post(f"{url}/sessions", json={"task": "t1", "group": 4}).json()["api_key"]
    client = client_for(url, sid)
    for _ in range(2):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "room 0 ."}], max_tokens=1)
    assert httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 0.25, "call": 0}).status_code == 200
    bad = httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 1, "call": 7})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "unknown_call"
    assert httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": "high"}).status_code == 400
    httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 1.0, "success": True})
    shown = httpx.get(f"{url}/sessions/{sid}").json()
    assert shown["call_rewards"] == {"0": 0.25} and shown["reward"] == 1.0 and shown["segments"] == 2
    gateway.close_session(sid)
    traj = session_trajectory(gateway.session(sid), 4, 0)
    assert traj.total_reward == 1.25 and traj.success and traj.task_id == "t1"


class Gated:
    """The tiny model behind a gate: generate waits until the test opens it (a call that takes its time)."""

    def __init__(self, policy):
        self.policy, self.entered, self.gate = policy, threading.Event(), threading.Event()

    def generate(self, requests):
        self.entered.set()
        assert self.gate.wait(30)
        return self.policy.generate(requests)


def test_a_caller_that_hangs_up_loses_only_that_call(tiny_policy, serve):
    policy, chat = tiny_policy
    gated = Gated(policy)
    gateway, url = serve(gated, chat, max_new_tokens=2)
    session, other = gateway.open_session(), gateway.open_session()
    body = {"model": "m", "messages": [{"role": "user", "content": "room 0 ."}], "max_tokens": 1}
    with pytest.raises(httpx.ReadTimeout):   # the harness gives up mid-call and closes its connection
        httpx.post(f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {session.id}"}, timeout=1.0)
    assert gated.entered.is_set()
    deadline = time.monotonic() + 10
    while gateway.session(session.id).lost_calls == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    gated.gate.set()
    assert gateway.session(session.id).lost_calls == 1 and not gateway.session(session.id).calls
    # the same session and another one go on as if nothing happened
    client_for(url, session.id).chat.completions.create(**body)
    client_for(url, other.id).chat.completions.create(**body)
    assert len(gateway.session(session.id).calls) == 1 and len(gateway.session(other.id).calls) == 1


def test_open_sessions_are_bounded(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_sessions=2)
    first = httpx.post(f"{url}/sessions", json={}).json()["id"]
    httpx.post(f"{url}/sessions", json={})
    refused = httpx.post(f"{url}/sessions", json={})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_sessions"
    httpx.post(f"{url}/sessions/{first}/close", json={"reward": 0})
    assert httpx.post(f"{url}/sessions", json={}).status_code == 200   # a closed one frees its place


def test_health_reports_batches(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=1)
    sessions = [gateway.open_session() for _ in range(4)]
    threads = [threading.Thread(target=lambda s=s: client_for(url, s.id).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "room 0 ."}], max_tokens=1)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    health = httpx.get(url.rsplit("/v1", 1)[0] + "/health").json()
    assert health["served"] == 4 and health["rows"] == 4 and 1 <= health["batches"] <= 4
    assert json.loads(json.dumps(health))["sessions"] == {"open": 4, "closed": 0}


class Failing:
    """The tiny model, except that a prompt holding the word "door" makes the engine raise."""

    def __init__(self, policy, chat):
        self.policy, self.boom = policy, chat.encode("door")[0]

    def generate(self, requests):
        if any(self.boom in r.prompt_ids for r in requests):
            raise RuntimeError("CUDA out of memory (simulated)")
        return self.policy.generate(requests)


def test_an_engine_failure_and_a_prompt_past_the_context_limit_are_errors_not_crashes(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(Failing(policy, chat), chat, max_new_tokens=2, max_context_tokens=40)
    session = gateway.open_session()
    client = client_for(url, session.id)
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "door"}], max_tokens=1)
    assert failed.value.code == "engine_error" and "out of memory" in failed.value.message
    with pytest.raises(openai.BadRequestError) as long:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "room 0 . " * 12}])
    assert long.value.code == "context_length_exceeded"
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "room 0 ."}], max_tokens=1)
    assert len(gateway.session(session.id).calls) == 1   # only the call that was answered is recorded
