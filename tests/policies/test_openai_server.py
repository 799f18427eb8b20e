"""OpenAIPolicy against a real OpenAI-compatible server: llama-cpp-python serving the SmolLM2 GGUF.

llama-cpp-python's server takes text prompts only and returns no token ids, so these tests also pin the
loud `retokenize=True` fallback and the clear error without it. One server is killed mid-batch and one
mid-rollout: the affected requests come back as errors, nothing hangs, the others complete.
"""
from __future__ import annotations

import math
import socket
import subprocess
import sys
import time

import httpx
import pytest

from agentgym.errors import PolicyError
from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.policies.openai import OpenAIPolicy

pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]")
pytestmark = [pytest.mark.slow, pytest.mark.model]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """`python -m llama_cpp.server` on a free loopback port, killed for good on exit."""

    def __init__(self, tmp_path) -> None:
        from agentgym.policies.models import DEFAULT_MODEL, embedded_gguf_path

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"llama-{self.port}.log"
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf_path(DEFAULT_MODEL)),
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048", "--n_threads", "1"]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.kill()
        pytest.fail(f"llama_cpp.server not ready in {limit}s: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = LlamaServer(tmp_path_factory.mktemp("llama"))
    yield srv
    srv.kill()


class KillAfter(httpx.AsyncBaseTransport):
    """A real HTTP transport that kills the server right after its n-th completion answer."""

    def __init__(self, server: LlamaServer, n: int) -> None:
        self.inner, self.server, self.n, self.answers = httpx.AsyncHTTPTransport(), server, n, 0

    async def handle_async_request(self, request):
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith("/completions") and response.status_code == 200:
            await response.aread()
            self.answers += 1
            if self.answers == self.n:
                self.server.kill()
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _prompt(tokenizer, text="Hi"):
    return tuple(tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, return_dict=False))


def test_real_server_with_retokenize_fallback(server, smol):
    policy = OpenAIPolicy(server.url, tokenizer=smol.tokenizer, retokenize=True, max_retries=1)
    prompt = _prompt(smol.tokenizer)
    greedy, short = policy.generate([GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=12)),
                                     GenerationRequest(prompt, SamplingParams(temperature=0.8, max_tokens=4,
                                                                              seed=3))])
    assert greedy.error is None and greedy.retokenized and greedy.text.strip()
    assert smol.tokenizer.decode(list(greedy.token_ids), skip_special_tokens=True) == greedy.text
    assert len(greedy.logprobs) == len(greedy.token_ids)
    assert all(lp <= 1e-4 for lp in greedy.logprobs if not math.isnan(lp))
    if greedy.finish_reason == "stop":
        assert greedy.token_ids[-1] == smol.tokenizer.eos_token_id
    assert short.finish_reason == "length" and 0 < len(short.token_ids) <= 5
    assert policy.text_prompts  # the server refused the id prompt once; the policy remembered


def test_real_server_without_token_ids_is_a_clear_error(server, smol):
    policy = OpenAIPolicy(server.url, max_retries=0)
    with pytest.raises(PolicyError, match="does not accept token-id prompts"):
        policy.generate([GenerationRequest(_prompt(smol.tokenizer), SamplingParams(max_tokens=2))])


def test_server_killed_mid_batch(tmp_path, smol):
    srv = LlamaServer(tmp_path)
    try:
        policy = OpenAIPolicy(srv.url, tokenizer=smol.tokenizer, retokenize=True, max_concurrency=2,
                              max_retries=2, backoff=0.05, timeout=30, transport=KillAfter(srv, 1))
        prompt = _prompt(smol.tokenizer)
        start = time.monotonic()
        gens = policy.generate([GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=6))] * 4)
        elapsed = time.monotonic() - start
    finally:
        srv.kill()
    # Two requests are in flight at once, so which one the server answers before it dies is a race:
    # the answered one(s) keep their tokens, every other request fails cleanly after its retries.
    answered = [g for g in gens if g.finish_reason in ("stop", "length")]
    failed = [g for g in gens if g.finish_reason == "error"]
    assert 1 <= len(answered) <= 2 and all(g.token_ids for g in answered)
    assert len(failed) == len(gens) - len(answered)
    assert all(g.error and "attempts" in g.error and not g.token_ids for g in failed)
    assert elapsed < 60


def test_server_killed_mid_rollout(tmp_path, smol):
    rollout_module = pytest.importorskip("agentgym.engine.rollout")
    srv = LlamaServer(tmp_path)
    try:
        policy = OpenAIPolicy(srv.url, tokenizer=smol.tokenizer, retokenize=True, max_concurrency=1,
                              max_retries=1, backoff=0.05, timeout=30, transport=KillAfter(srv, 2))
        config = rollout_module.RolloutConfig(max_turns=1, sampling=SamplingParams(temperature=0, max_tokens=6))
        start = time.monotonic()
        trajs = rollout_module.rollout("agentgym/Toy-KeyDoor-v0", policy, smol.chat_format(), [0, 1],
                                       group_size=2, config=config)
        elapsed = time.monotonic() - start
    finally:
        srv.kill()
    reasons = [t.end_reason for t in trajs]
    assert len(trajs) == 4 and reasons.count("failed") == 2, reasons
    assert all(t.error for t in trajs if t.end_reason == "failed")
    assert all(t.num_turns == 1 for t in trajs if t.end_reason != "failed")
    assert elapsed < 60
