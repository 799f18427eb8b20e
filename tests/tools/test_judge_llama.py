"""The LLM judge against a real OpenAI-compatible server: llama-cpp-python serving the embedded SmolLM2 GGUF.

A 135M model is a poor grader, so these tests pin the plumbing, not its taste: a real round trip whose
reply is either parsed into [0, 1] or recorded as an unparseable verdict quoting the reply; greedy replies
are cached (a repeat costs no request); concurrent judgements all finish under the bound; a timeout and a
killed server are recorded failures that score nothing.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from agentgym.rubric import Episode, Rubric, RubricItem, Step
from agentgym.tools.judges import GroupJudge, JudgeClient, JudgeError, LLMJudge

pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]")
pytestmark = [pytest.mark.slow, pytest.mark.model]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from agentgym.policies.models import DEFAULT_MODEL, embedded_gguf_path

    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "judge.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf_path(DEFAULT_MODEL)),
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=1.0).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail(f"llama_cpp.server not ready: {log.read_text()[-2000:]}")
    yield proc, url
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.fixture(autouse=True)
def _fresh_clients():
    JudgeClient._shared.clear()
    yield
    JudgeClient._shared.clear()


def episode(answer: str) -> Episode:
    steps = (Step(f"<answer>{answer}</answer>", "Answer received.", 0.0, {}),)
    return Episode("What is the capital of France?", "", steps, {"reference": "Paris"}, answer == "Paris")


def score_or_quoted_failure(judge, ep) -> float | None:
    try:
        value = judge(ep)
    except JudgeError as exc:
        assert "judge's reply" in str(exc)  # the server answered; the model just missed the format
        return None
    assert 0.0 <= value <= 1.0
    return value


def test_real_judge_round_trip_and_cache(llama):
    _, url = llama
    judge = LLMJudge(f"openai:{url}", parse="binary", max_tokens=8, timeout_s=60)
    first = score_or_quoted_failure(judge, episode("Paris"))
    assert judge.client.requests == 1
    assert score_or_quoted_failure(judge, episode("Paris")) == first  # greedy: cached, same verdict
    assert judge.client.requests == 1 and judge.client.cache_hits == 1
    reply = judge.client.ask([{"role": "user", "content": "Say yes."}], max_tokens=4, cache=False)
    assert isinstance(reply, str) and reply.strip()


def test_concurrent_judgements_under_a_bound_and_a_rubric(llama):
    _, url = llama
    rubric = Rubric([RubricItem("correct", lambda ep: float(ep.answer == "Paris")),
                     RubricItem("judge", LLMJudge(f"openai:{url}", max_tokens=8, max_concurrency=2), 0.5)])
    answers = ["Paris", "Lyon", "Nice", "Lille"]
    with ThreadPoolExecutor(4) as pool:
        scores = list(pool.map(lambda a: rubric.score(episode(a)), answers))
    for answer, scored in zip(answers, scores):
        assert scored.components["correct"] == float(answer == "Paris")
        assert ("judge" in scored.components) != ("judge" in scored.errors)
        if "judge" in scored.components:
            assert 0.0 <= scored.components["judge"] <= 0.5


def test_group_judge_on_the_real_server(llama):
    _, url = llama
    judge = GroupJudge(f"openai:{url}", max_tokens=24)
    try:
        scores = judge.score_group([episode("Paris"), episode("Lyon")])
        assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    except JudgeError as exc:
        assert "no 2 scores in the judge's reply" in str(exc)
    assert judge.client.requests == 1


def test_timeout_then_dead_server_are_recorded_failures(llama):
    proc, url = llama
    slow = LLMJudge(f"openai:{url}", max_tokens=400, timeout_s=0.05, retries=0,
                    prompt="Write a long story about {question}")
    scored = Rubric([RubricItem("judge", slow)]).score(episode("Paris"))
    assert scored.components == {} and "no answer within 0.05 s" in scored.errors["judge"]
    proc.kill()
    proc.wait(10)
    gone = LLMJudge(f"openai:{url}", retries=1, model_name="smollm2")
    scored = Rubric([RubricItem("judge", gone)]).score(episode("Lyon"))
    assert scored.components == {} and "2 attempt(s)" in scored.errors["judge"]
