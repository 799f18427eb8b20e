"""The openai policy over several servers: least-outstanding spread, retry elsewhere, down and back up.

Real HTTP on loopback throughout: small vLLM-style completion servers (token ids out) that can be made to
fail or be shut down, and, where llama-cpp-python[server] is installed, 2 real llama.cpp servers with one
killed mid-rollout.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentgym.errors import PolicyError
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.policies.openai import OpenAIPolicy, ServerState, pick_server, server_urls


class FakeVLLM:
    """A real loopback HTTP server answering /v1/completions like vLLM (ids back), `delay` s per request."""

    def __init__(self, token: int, delay: float = 0.05) -> None:
        outer = self
        self.token, self.delay, self.hits, self.status, self.peak, self._live = token, delay, 0, 200, 0, 0
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                self._send(200, {"data": [{"id": "fake"}]})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                with outer.lock:
                    outer.hits += 1
                    outer._live += 1
                    outer.peak = max(outer.peak, outer._live)
                time.sleep(outer.delay)
                with outer.lock:
                    outer._live -= 1
                if outer.status != 200:
                    return self._send(outer.status, {"error": "boom"})
                self._send(200, {"choices": [{"text": "x", "token_ids": [outer.token], "finish_reason": "length",
                                              "logprobs": {"token_logprobs": [-0.5]}}]})

            def _send(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def two():
    a, b = FakeVLLM(1), FakeVLLM(2)
    yield a, b
    for s in (a, b):
        try:
            s.stop()
        except Exception:
            pass


def _requests(n: int) -> list[GenerationRequest]:
    return [GenerationRequest((5, 6, 7), SamplingParams(max_tokens=1))] * n


def test_urls_parse_and_bad_ones_say_how():
    assert server_urls("http://a:1, http://b:2/v1/") == ["http://a:1/v1", "http://b:2/v1"]
    assert server_urls(["http://a:1"]) == ["http://a:1/v1"]
    with pytest.raises(PolicyError, match="http://"):
        server_urls("a:1,http://b:2")
    with pytest.raises(PolicyError, match="at least one"):
        server_urls(" , ")


def test_pick_prefers_up_least_outstanding_untried():
    a, b, c = ServerState("a", outstanding=3), ServerState("b", outstanding=1), ServerState("c", down_until=50.0)
    assert pick_server([a, b, c], now=10.0, avoid=set()).url == "b"
    assert pick_server([a, b, c], now=10.0, avoid={"b"}).url == "a"
    assert pick_server([a, b, c], now=60.0, avoid=set()).url == "c"   # back up after its down time
    a.down_until = b.down_until = 40.0
    assert pick_server([a, b, c], now=10.0, avoid=set()).url in ("a", "b")  # all down: soonest back


def test_load_is_spread_over_both_servers(two):
    a, b = two
    policy = OpenAIPolicy([a.url, b.url], max_concurrency=8, max_retries=1)
    gens = policy.generate(_requests(16))
    assert all(g.error is None for g in gens)
    assert a.hits + b.hits == 16 and abs(a.hits - b.hits) <= 2, (a.hits, b.hits)
    assert {g.token_ids[0] for g in gens} == {1, 2}


def test_failed_request_is_retried_on_the_other_server_and_server_comes_back(two):
    a, b = two
    a.status = 503
    policy = OpenAIPolicy(f"{a.url},{b.url}", max_concurrency=4, max_retries=1, backoff=0.01, down_s=0.5)
    gens = policy.generate(_requests(8))
    assert all(g.error is None and g.token_ids == (2,) for g in gens)   # every one answered by b
    down = policy.servers[0]
    assert down.failures >= 1 and not down.is_up(time.monotonic())
    a.status = 200
    time.sleep(0.6)                                                      # its down time passes
    gens = policy.generate(_requests(8))
    assert all(g.error is None for g in gens) and down.answered > 0 and down.is_up(time.monotonic())


def test_a_stopped_server_is_marked_down_and_requests_go_elsewhere(two):
    a, b = two
    a.stop()
    policy = OpenAIPolicy([a.url, b.url], max_concurrency=4, max_retries=1, backoff=0.01, down_s=30)
    start = time.monotonic()
    gens = policy.generate(_requests(6))
    assert all(g.error is None and g.token_ids == (2,) for g in gens)
    assert policy.servers[0].failures >= 1 and time.monotonic() - start < 10


def test_all_servers_dead_is_an_error_generation_not_a_hang(two):
    a, b = two
    a.stop()
    b.stop()
    gens = OpenAIPolicy([a.url, b.url], max_retries=2, backoff=0.01, timeout=5).generate(_requests(2))
    assert all(g.finish_reason == "error" and "2 servers" in g.error for g in gens)


@pytest.mark.slow
@pytest.mark.model
def test_two_llama_cpp_servers_one_killed_mid_rollout(tmp_path, smol):
    pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]")
    from test_openai_server import KillAfter, LlamaServer  # tests/policies is on sys.path (rootdir-less)

    from agentgym.engine import rollout as R

    first, second = LlamaServer(tmp_path), LlamaServer(tmp_path)
    try:
        # a real transport that kills the first server after its 2nd answer, mid-rollout
        policy = OpenAIPolicy([first.url, second.url], tokenizer=smol.tokenizer, retokenize=True,
                              max_concurrency=2, max_retries=2, backoff=0.05, timeout=30, down_s=60,
                              transport=KillAfter(first, 2))
        config = R.RolloutConfig(max_turns=3, sampling=SamplingParams(temperature=0, max_tokens=6))
        trajs = R.rollout("agentgym/Toy-KeyDoor-v0", policy, smol.chat_format(), [0, 1], group_size=2,
                          config=config)
    finally:
        first.kill()
        second.kill()
    assert first.proc.poll() is not None
    assert len(trajs) == 4 and all(t.end_reason != "failed" for t in trajs), [t.error for t in trajs]
    s1, s2 = policy.servers
    assert s1.failures >= 1 and s2.answered > 0 and not s1.is_up(time.monotonic())
