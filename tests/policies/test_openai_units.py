"""OpenAIPolicy against httpx MockTransport: retries, backoff, 429, timeouts, concurrency, token ids."""
from __future__ import annotations

import asyncio
import json
import math
import time

import httpx
import pytest

from agentgym.errors import PolicyError
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.policies.openai import (OpenAIPolicy, backoff_delay, completion_body, parse_logprobs,
                                      parse_token_ids)

REQ = GenerationRequest((1, 2, 3), SamplingParams(temperature=0.5, max_tokens=4, stop=("\n",), seed=7))


def vllm_choice(ids=(11, 12), text="ab", finish="stop"):
    """A vLLM-style choice: ids in `token_ids` and as 'token_id:N' logprob tokens."""
    return {"text": text, "finish_reason": finish, "token_ids": list(ids),
            "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": [-0.5] * len(ids)}}


def ok(choice=None):
    return httpx.Response(200, json={"choices": [choice or vllm_choice()]})


def policy_with(handler, **kwargs):
    kwargs.setdefault("backoff", 0.001)
    return OpenAIPolicy("http://127.0.0.1:9/v1", model="m", transport=httpx.MockTransport(handler), **kwargs)


def test_request_body_sends_token_ids_and_sampling():
    body = completion_body("m", REQ, [1, 2, 3])
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 4 and body["temperature"] == 0.5
    assert body["stop"] == ["\n"] and body["seed"] == 7 and body["logprobs"] == 1
    assert body["return_tokens_as_token_ids"] and body["return_token_ids"]


def test_parse_token_ids_both_vllm_forms():
    assert parse_token_ids({"token_ids": [5, 6]}) == [5, 6]
    assert parse_token_ids({"logprobs": {"tokens": ["token_id:5", "token_id:6"]}}) == [5, 6]
    assert parse_token_ids({"logprobs": {"tokens": ["He", "llo"]}}) is None
    assert parse_logprobs({"logprobs": {"token_logprobs": [-1, None]}}, 2)[0] == -1.0
    assert parse_logprobs({"logprobs": {"token_logprobs": [-1]}}, 2) is None


def test_backoff_grows_caps_and_honours_retry_after():
    assert all(0.5 <= backoff_delay(0, 1.0, 10.0) <= 1.0 for _ in range(20))
    assert all(backoff_delay(10, 1.0, 4.0) <= 4.0 for _ in range(20))
    assert backoff_delay(0, 1.0, 10.0, "3") == 3.0
    assert backoff_delay(0, 1.0, 2.0, "30") == 2.0


def test_success_carries_ids_text_logprobs():
    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        return ok()

    gen, = policy_with(handler).generate([REQ])
    assert gen.token_ids == (11, 12) and gen.text == "ab" and gen.logprobs == (-0.5, -0.5)
    assert gen.finish_reason == "stop" and gen.error is None and not gen.retokenized
    assert seen[0]["prompt"] == [1, 2, 3] and seen[0]["model"] == "m"


def test_429_and_5xx_are_retried_then_succeed():
    statuses = iter([429, 503, 200])
    calls = []

    def handler(request):
        calls.append(1)
        status = next(statuses)
        return ok() if status == 200 else httpx.Response(status, headers={"retry-after": "0"}, text="busy")

    gen, = policy_with(handler, max_retries=3).generate([REQ])
    assert gen.finish_reason == "stop" and len(calls) == 3


def test_bounded_retries_then_error_generation():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(500, text="boom")

    gen, = policy_with(handler, max_retries=2).generate([REQ])
    assert gen.finish_reason == "error" and "HTTP 500" in gen.error and "3 attempts" in gen.error
    assert len(calls) == 3 and gen.token_ids == ()


def test_connection_errors_are_retried():
    calls = []

    def handler(request):
        calls.append(1)
        if len(calls) < 3:
            raise httpx.ConnectError("refused", request=request)
        return ok()

    assert policy_with(handler, max_retries=3).generate([REQ])[0].finish_reason == "stop"
    assert len(calls) == 3


def test_client_errors_are_not_retried():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(400, text="This model's maximum context length is 2048 tokens")

    gen, = policy_with(handler, max_retries=5).generate([REQ])
    assert gen.finish_reason == "error" and "maximum context length" in gen.error and len(calls) == 1


def test_timeout_gives_error_not_hang():
    calls = []

    async def handler(request):
        calls.append(1)
        await asyncio.sleep(30)
        return ok()

    policy = policy_with(handler, timeout=0.2, max_retries=1)
    start = time.monotonic()
    gen, = policy.generate([REQ])
    assert gen.finish_reason == "error" and "TimeoutError" in gen.error and len(calls) == 2
    assert time.monotonic() - start < 5


def peak_tracking_handler():
    """A slow handler that records how many requests it served at once (state["peak"])."""
    state = {"now": 0, "peak": 0}

    async def handler(request):
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.02)
        state["now"] -= 1
        return ok()

    return state, handler


def test_concurrency_is_limited():
    state, handler = peak_tracking_handler()

    gens = policy_with(handler, max_concurrency=3).generate([REQ] * 12)
    assert all(g.finish_reason == "stop" for g in gens) and state["peak"] == 3


def test_concurrency_limit_is_shared_by_concurrent_calls():
    state, handler = peak_tracking_handler()

    policy = policy_with(handler, max_concurrency=2)

    async def two_callers():
        return await asyncio.gather(policy.agenerate([REQ] * 4), policy.agenerate([REQ] * 4))

    first, second = asyncio.run(two_callers())
    assert len(first) == len(second) == 4 and state["peak"] == 2


def test_no_token_ids_is_a_clear_policy_error():
    def handler(request):
        return ok({"text": "hi", "finish_reason": "stop", "logprobs": {"tokens": ["hi"], "token_logprobs": [-1]}})

    with pytest.raises(PolicyError, match="returned no token ids"):
        policy_with(handler).generate([REQ])


class FakeTokenizer:
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


def test_text_only_server_needs_retokenize_and_is_flagged():
    bodies = []

    def handler(request):
        body = json.loads(request.content)
        bodies.append(body)
        if isinstance(body["prompt"], list):  # llama-cpp-python's answer to an id prompt
            return httpx.Response(500, text="1 validation error: prompt Input should be a valid string")
        return ok({"text": "hi", "finish_reason": "stop", "logprobs": {"tokens": ["h", "i"],
                                                                       "token_logprobs": [-1.0, -2.0]}})

    with pytest.raises(PolicyError, match="does not accept token-id prompts"):
        policy_with(handler).generate([GenerationRequest((72, 73), SamplingParams())])
    policy = policy_with(handler, tokenizer=FakeTokenizer(), retokenize=True)
    gen, = policy.generate([GenerationRequest((72, 73), SamplingParams())])
    assert bodies[-1]["prompt"] == "HI" and gen.retokenized
    assert gen.token_ids == (104, 105, 0) and gen.logprobs[:2] == (-1.0, -2.0) and math.isnan(gen.logprobs[2])


def test_bad_config_and_empty_prompt():
    with pytest.raises(PolicyError, match="http"):
        OpenAIPolicy("localhost:8000")
    with pytest.raises(PolicyError, match="tokenizer"):
        OpenAIPolicy("http://x", retokenize=True)
    gen, = policy_with(lambda r: ok()).generate([GenerationRequest((), SamplingParams())])
    assert gen.finish_reason == "error" and "empty prompt" in gen.error


def test_model_is_discovered_and_sync_generate_works_inside_a_loop():
    def handler(request):
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "served-model"}]})
        assert json.loads(request.content)["model"] == "served-model"
        return ok()

    policy = OpenAIPolicy("http://127.0.0.1:9", transport=httpx.MockTransport(handler))

    async def inside_loop():
        return policy.generate([REQ])  # a sync call from async code must not deadlock

    assert asyncio.run(inside_loop())[0].finish_reason == "stop" and policy.model == "served-model"
