"""LLM judges with exact assertions: a scripted OpenAI-compatible server on loopback (a real HTTP server
whose replies the test decides) and the in-process scripted backend. Prompt rendering, verdict parsing,
caching and in-flight sharing, bounded concurrency, timeouts, retries, failures that score nothing, and
RULER-style group judging of recorded trajectories."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from scripted_judge_server import ScriptedJudgeServer  # tests/tools is on sys.path under pytest

from agentgym.errors import ConfigError
from agentgym.rubric import Episode, Rubric, RubricItem, Step
from agentgym.trajectory import Trajectory, Turn
from agentgym.tools.judges import (GroupJudge, JudgeClient, JudgeError, LLMJudge, ScriptedBackend, judge_groups,
                                   parse_group_verdict, parse_verdict)


@pytest.fixture
def serve():
    servers = []

    def start(reply, delay_s=0.0):
        servers.append(ScriptedJudgeServer(reply, delay_s))
        return servers[-1]
    yield start
    for s in servers:
        s.close()


@pytest.fixture(autouse=True)
def _fresh_shared_clients():
    JudgeClient._shared.clear()  # each test counts its own requests
    yield
    JudgeClient._shared.clear()


def episode(answer: str = "Paris", question: str = "Capital of France?") -> Episode:
    steps = (Step('<tool_call>{"name": "search"}</tool_call>', "France: capital Paris", 0.0, {}),
             Step(f"<answer>{answer}</answer>", "Answer received.", 1.0, {}))
    return Episode(question, "Be brief.", steps, {"reference": "Paris"}, True)


def last_user(body) -> str:
    return body["messages"][-1]["content"]


def test_prompt_template_fields_and_score_parsing(serve):
    server = serve(lambda body: (200, "The answer matches.\nScore: 8"))
    judge = LLMJudge(f"openai:{server.url}", prompt="Q={question}|A={answer}|R={reference}|I={instructions}",
                     system="grade")
    assert judge(episode()) == 0.8
    body = server.requests[0]
    assert body["model"] == "scripted-judge" and body["temperature"] == 0.0 and body["max_tokens"] == 256
    assert body["messages"] == [{"role": "system", "content": "grade"},
                                {"role": "user", "content": "Q=Capital of France?|A=Paris|R=Paris|I=Be brief."}]
    default = LLMJudge(f"openai:{server.url}").render(episode())
    assert "AGENT (turn 1)" in default and "Agent's final answer:\nParis" in default


@pytest.mark.parametrize("text,mode,expected", [
    ("Score: 7", "score", 0.7), ("score = 3/5", "score", 0.6), ("**Score:** 10", "score", 1.0), ("9", "score", 0.9),
    ("Score: 14", "score", 1.0), ("first Score: 2 then Score: 6", "score", 0.6),
    ("Yes.", "binary", 1.0), ("no, it is wrong", "binary", 0.0), ("Reasoning... Verdict: CORRECT", "binary", 1.0),
    ("The answer is incorrect", "binary", 0.0), ("rating [4]", r"\[(\d)\]", 0.4),
])
def test_parse_verdict(text, mode, expected):
    assert parse_verdict(text, mode, 10.0) == pytest.approx(expected)


@pytest.mark.parametrize("text,mode", [("I cannot decide", "score"), ("maybe", "binary"), ("x", r"(\d+)")])
def test_unparseable_verdicts_raise(text, mode):
    with pytest.raises(JudgeError):
        parse_verdict(text, mode)


def test_identical_judgements_are_cached_and_concurrent_duplicates_share_one_request(serve):
    server = serve(lambda body: (200, "Score: 5"), delay_s=0.3)
    judge = LLMJudge(f"openai:{server.url}")
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda _: judge(episode()), range(8)))
    assert scores == [0.5] * 8 and len(server.requests) == 1
    assert judge(episode()) == 0.5 and len(server.requests) == 1
    assert judge(episode("Lyon")) == 0.5 and len(server.requests) == 2
    # a second judge with the same settings shares the client, so its cache too (a vector env's many rubrics)
    assert LLMJudge(f"openai:{server.url}")(episode()) == 0.5 and len(server.requests) == 2
    uncached = LLMJudge(f"openai:{server.url}", cache=False)
    uncached(episode()), uncached(episode())
    assert len(server.requests) == 4


def test_concurrency_is_bounded_across_judges(serve):
    server = serve(lambda body: (200, "Score: 1"), delay_s=0.2)
    judges = [LLMJudge(f"openai:{server.url}", max_concurrency=2) for _ in range(3)]
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(lambda i: judges[i % 3](episode(f"answer {i}")), range(12)))
    assert len(server.requests) == 12 and server.peak == 2


def test_retries_server_errors_then_succeeds(serve):
    answers = iter([(503, "overloaded"), (429, "slow down"), (200, "Score: 9")])
    server = serve(lambda body: next(answers))
    judge = LLMJudge(f"openai:{server.url}", retries=2)
    judge.client.settings = type(judge.client.settings)(4, 60.0, 2, 0.01)  # fast backoff for the test
    assert judge(episode()) == 0.9 and len(server.requests) == 3


def test_a_refused_request_is_not_retried_and_a_failure_scores_nothing(serve):
    server = serve(lambda body: (400, "bad model"))
    judge = LLMJudge(f"openai:{server.url}", retries=3)
    rubric = Rubric([RubricItem("correct", lambda ep: 1.0), RubricItem("judge", judge, 0.5)])
    scored = rubric.score(episode())
    assert len(server.requests) == 1
    assert scored.components == {"correct": 1.0} and "HTTP 400" in scored.errors["judge"]


def test_timeouts_and_an_unreachable_judge_are_recorded_failures(serve):
    server = serve(lambda body: (200, "Score: 9"), delay_s=2.0)
    judge = LLMJudge(f"openai:{server.url}", timeout_s=0.3, retries=1)
    judge.client.settings = type(judge.client.settings)(4, 0.3, 1, 0.01)
    start = time.perf_counter()
    scored = Rubric([RubricItem("judge", judge)]).score(episode())
    assert scored.components == {} and "no answer within 0.3 s" in scored.errors["judge"]
    assert "2 attempt(s)" in scored.errors["judge"] and time.perf_counter() - start < 1.9
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    gone = LLMJudge(f"openai:http://127.0.0.1:{dead_port}", retries=0, model_name="m")
    assert "ConnectError" in Rubric([RubricItem("judge", gone)]).score(episode()).errors["judge"]


def test_garbage_verdict_is_recorded_not_raised(serve):
    server = serve(lambda body: (200, "I'd rather not say."))
    scored = Rubric([RubricItem("judge", LLMJudge(f"openai:{server.url}"))]).score(episode())
    assert scored.components == {} and "no 'Score: N'" in scored.errors["judge"]


def test_disk_cache_survives_a_new_client(serve, tmp_path):
    server = serve(lambda body: (200, "Score: 3"))
    path = tmp_path / "judge-cache.jsonl"
    assert LLMJudge(f"openai:{server.url}", cache_path=str(path))(episode()) == 0.3
    JudgeClient._shared.clear()
    assert LLMJudge(f"openai:{server.url}", cache_path=str(path))(episode()) == 0.3
    assert len(server.requests) == 1 and len(path.read_text().splitlines()) == 1


@pytest.mark.parametrize("kwargs,needle", [
    ({"model": "claude:x"}, "unknown judge"), ({"model": "openai:ftp://x"}, "http"),
    ({"prompt": "{question} {colour}"}, "unknown field"), ({"parse": "("}, "neither"),
    ({"parse": r"\d+"}, "one group"), ({"max_concurrency": 0}, ">= 1"), ({"scale": 0}, "> 0"),
])
def test_bad_judge_settings_are_config_errors(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        LLMJudge(**{"model": "openai:http://127.0.0.1:9", **kwargs})


def test_judge_from_a_rubric_config(serve):
    server = serve(lambda body: (200, "yes" if "final answer:\nParis" in last_user(body) else "no"))
    rubric = Rubric.from_config([{"name": "judge", "fn": "judge", "weight": 2.0,
                                  "kwargs": {"model": f"openai:{server.url}", "parse": "binary"}}])
    assert rubric.score(episode()).components == {"judge": 2.0}
    assert rubric.score(episode("Lyon")).components == {"judge": 0.0}


def test_scripted_backend_gives_exact_replies():
    backend = ScriptedBackend(lambda messages: "Score: 10" if "final answer:\nParis" in messages[-1]["content"]
                              else "Score: 0")
    judge = LLMJudge(backend)
    assert judge(episode()) == 1.0 and judge(episode("Lyon")) == 0.0 and backend.calls == 2
    assert judge(episode()) == 1.0 and backend.calls == 2  # cached
    empty = LLMJudge(ScriptedBackend([]), retries=0)
    with pytest.raises(JudgeError, match="no replies left"):
        empty(episode())


def trajectory(group: int, index: int, answer: str) -> Trajectory:
    turns = (Turn(0, "Capital of France?", '<tool_call>{"name": "search"}</tool_call>', (), (), (), 0.0),
             Turn(1, "France: capital Paris", f"<answer>{answer}</answer>", (), (), (), 0.5, {"outcome": 0.5},
                  terminated=True))
    return Trajectory("agentgym/X-v0", group, group, index, turns, answer == "Paris", "terminated",
                      first_observation="Capital of France?", final_observation="Answer received.")


def test_group_judging_scores_all_g_trajectories_in_one_call():
    seen = []

    def reply(messages):
        prompt = messages[-1]["content"]
        seen.append(prompt)
        if "Final answer: Rome" in prompt:
            return "no idea"
        finals = [line.removeprefix("Final answer: ") for line in prompt.splitlines() if line.startswith("Final answer")]
        return json.dumps({"scores": [10 if f == "Paris" else 2 for f in finals]})

    judge = GroupJudge(ScriptedBackend(reply))
    trajs = [trajectory(0, 0, "Paris"), trajectory(0, 1, "Lyon"), trajectory(1, 0, "Rome"), trajectory(0, 2, "Paris")]
    out = judge_groups(trajs, judge, name="ruler", weight=0.5)
    assert len(seen) == 2  # one call per group
    assert "### Trajectory 3" in next(p for p in seen if "Lyon" in p)
    rewards = [t.turns[-1].reward for t in out]
    assert rewards == pytest.approx([1.0, 0.6, 0.5, 1.0])
    assert out[1].turns[-1].reward_components == pytest.approx({"outcome": 0.5, "ruler": 0.1})
    assert out[2].turns[-1].reward_components == {"outcome": 0.5} and out[2].turns[-1].reward == 0.5
    assert "no 1 scores in the judge's reply" in out[2].turns[-1].info["ruler_error"]
    assert out[0].turns[0] == trajs[0].turns[0]  # earlier turns untouched


def test_parse_group_verdict():
    assert parse_group_verdict('Sure! {"scores": [10, 0, 5]}', 3) == [1.0, 0.0, 0.5]
    assert parse_group_verdict("Trajectory 1: 4\nTrajectory 2: 8", 2) == [0.4, 0.8]
    with pytest.raises(JudgeError):
        parse_group_verdict('{"scores": [1, 2]}', 3)
