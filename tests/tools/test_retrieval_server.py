"""The retrieval server on a real uvicorn (loopback, free port) and its httpx clients."""
from __future__ import annotations

import asyncio
import json
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import agentgym
from agentgym.tools.retrieval import RetrievalError, corpus_from_spec, get_retriever
from agentgym.tools.retrieval.client import AsyncRetrievalClient, RetrievalClient
from agentgym.tools.retrieval.server import ServerThread, build_retrievers, create_app

QUERIES = ["Kigel Orchestra", "violinist born in 1754", "capital trade neighbours", "film about exile",
           "Zizhanwick", "university founded 1800", "", "the of", "zzzqqq", "Muskaxia capital"]


@pytest.fixture(scope="module")
def corpus():
    return corpus_from_spec("generated:0:small")


@pytest.fixture(scope="module")
def server(corpus):
    with ServerThread(create_app(corpus, build_retrievers(corpus))) as running:
        yield running


def test_server_and_in_process_give_the_same_results(corpus, server):
    local, remote = get_retriever(corpus, "bm25"), get_retriever(method="bm25", url=server.url)
    for query in QUERIES + [d.title for d in corpus.documents[::40]]:
        for k in (1, 3, 10):
            assert remote.search(query, k) == local.search(query, k), query
    assert remote.search_batch(QUERIES, 4) == local.search_batch(QUERIES, 4)
    assert remote.health()["documents"] == len(corpus)


@pytest.mark.parametrize("body, status", [
    (b"{not json", 422), (b"", 422), (b"[1, 2]", 422), (b'{"k": 3}', 422), (b'{"query": 5}', 422),
    (b'{"query": "x", "k": 0}', 422), (b'{"query": "x", "k": 100000}', 422), (b'{"query": "x", "k": "a"}', 422),
    (b'{"query": "x", "method": "splade"}', 400), (b'{"query": "x", "method": "dense"}', 400),
    (json.dumps({"query": "x" * 20_000}).encode(), 422), (b"\xff\xfe\x00garbage", 422)])
def test_malformed_requests_get_json_errors_and_the_server_lives_on(server, body, status):
    response = httpx.post(server.url + "/search", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert "detail" in response.json()
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


def test_bad_batch_and_unknown_paths(server):
    assert httpx.post(server.url + "/batch_search", json={"queries": "not a list"}).status_code == 422
    assert httpx.post(server.url + "/batch_search", json={"queries": ["x" * 20_000]}).status_code == 422
    assert httpx.post(server.url + "/batch_search", json={"queries": ["a"] * 5000}).status_code == 422
    assert httpx.get(server.url + "/nope").status_code == 404
    with pytest.raises(RetrievalError, match="400.*not served here"):
        RetrievalClient(server.url, method="dense").search("x")


def test_concurrent_clients_get_their_own_answers(corpus, server):
    local = get_retriever(corpus, "bm25")
    client = RetrievalClient(server.url)  # one pooled client shared by threads
    queries = [d.title for d in corpus.documents[:120]]
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda q: client.search(q, 3), queries))
        fresh = list(pool.map(lambda q: RetrievalClient(server.url).search(q, 2), queries[:24]))
    assert results == [local.search(q, 3) for q in queries]
    assert fresh == [local.search(q, 2) for q in queries[:24]]


def test_async_client_runs_many_requests_at_once(corpus, server):
    local = get_retriever(corpus, "bm25")

    async def main():
        client = AsyncRetrievalClient(server.url)
        try:
            results = await asyncio.gather(*(client.search(q, 3) for q in QUERIES * 3))
            batch = await client.search_batch(QUERIES, 2)
            return results, batch, await client.health()
        finally:
            await client.aclose()

    results, batch, health = asyncio.run(main())
    assert results == [local.search(q, 3) for q in QUERIES * 3]
    assert batch == local.search_batch(QUERIES, 2) and health["status"] == "ok"


def test_client_retries_then_fails_with_a_helpful_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RetrievalClient(f"http://127.0.0.1:{port}", retries=2, backoff_s=0.01, timeout_s=1.0)
    with pytest.raises(RetrievalError, match="after 3 attempt.*agentgym serve retrieval"):
        client.search("x")


def test_env_through_the_server_matches_the_in_process_env(server):
    local = agentgym.make("agentgym/Search-3Hop-v0")
    remote = agentgym.make("agentgym/Search-3Hop-v0", retriever_url=server.url)
    for seed in range(6):
        assert local.reset(seed=seed)[0] == remote.reset(seed=seed)[0]
        done = False
        while not done:
            action = local.oracle_action()
            assert action == remote.oracle_action()
            a, b = local.step(action), remote.step(action)
            assert a[:4] == b[:4] and a[4]["retrieved"] == b[4]["retrieved"]
            done = a[2] or a[3]
        assert a[1] == 1.0


def test_env_reports_a_dead_server_as_an_observation():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = agentgym.make("agentgym/Search-1Hop-v0", retriever_url=f"http://127.0.0.1:{port}")
    env.reset(seed=0)
    env.unwrapped.retriever.retries = 0
    obs, reward, terminated, _, info = env.step(env.oracle_action())
    assert "search failed" in obs and "agentgym serve retrieval" in obs
    assert not info["valid_action"] and not terminated and reward == 0.0


def test_serve_cli_parses_and_rejects_bad_ports():
    from agentgym.cli import build_parser, main

    args = build_parser().parse_args(["serve", "retrieval", "--corpus", "generated:0:tiny", "--port", "0", "--dense"])
    assert args.corpus == "generated:0:tiny" and args.port == 0 and args.dense and args.host == "127.0.0.1"
    assert main(["serve", "retrieval", "--port", "70000"]) == 2


def test_auto_starts_one_shared_server_process_via_the_cli():
    from agentgym.tools.retrieval.server import _LAUNCHED, _stop, launch_server

    env = agentgym.make("agentgym/Search-2Hop-v0", world_size="tiny", retriever_url="auto")
    try:
        env.reset(seed=0)
        url = env.unwrapped.retriever.url
        assert url == launch_server("generated:0:tiny")  # the same child serves every env of that corpus
        assert RetrievalClient(url).health()["corpus"] == "generated:0:tiny"
        reward, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.oracle_action())
            done = terminated or truncated
        assert reward == 1.0
    finally:
        for proc, _ in _LAUNCHED.values():
            _stop(proc)
        _LAUNCHED.clear()
