"""Retrieval latency and throughput on a generated corpus (default 100k documents), side by side.

    python benchmarks/retrieval.py                 # 100k docs: BM25 (bm25s) vs rank-bm25, server, dense
    python benchmarks/retrieval.py --docs 20000 --dense-docs 500 --queries 200   # a quicker run

Rows: bm25s in process; bm25s through the HTTP server (one client, sequential, and `--clients`
concurrent clients); rank-bm25 (BM25Okapi, the naive baseline) on the same documents or on a subset
(`--rank-docs`), extrapolated linearly to the full corpus when a subset is used (its query cost is one
Python pass over every document per query term, so linear in documents); dense (MiniLM) on an embedded
subset (`--dense-docs`: embedding 100k documents on 2 CPU cores takes too long), plus the exact
similarity scan over 100k vectors (the subset's vectors tiled to the full size) to show the search cost
at full scale. Queries are entity names and generated multi-hop questions. Targets: BM25 p50 < 5 ms at
100k documents, and >= 20x rank-bm25's throughput.
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def percentiles(seconds: list[float]) -> tuple[float, float, float]:
    ms = np.asarray(seconds) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), float(np.mean(ms))


def timed(fn, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        start = time.perf_counter()
        fn(q)
        out.append(time.perf_counter() - start)
    return out


def row(name: str, docs: int, seconds: list[float], qps: float | None = None, note: str = "") -> dict:
    p50, p99, mean = percentiles(seconds)
    qps = qps if qps is not None else 1e3 / mean
    print(f"{name:<34} {docs:>8} {p50:>9.3f} {p99:>9.3f} {qps:>10.1f}  {note}", flush=True)
    return {"name": name, "p50": p50, "p99": p99, "qps": qps}


def make_queries(n: int, corpus, world_size: int) -> list[str]:
    from agentgym.envs.search.questions import make_question
    from agentgym.envs.search.world import generate_world

    rng = random.Random(0)
    world = generate_world(0, world_size)
    names = [rng.choice(corpus.documents).title for _ in range(n // 2)]
    questions = [make_question(world, s).question for s in range(n - len(names))]
    queries = names + questions
    rng.shuffle(queries)
    return queries


def concurrent_qps(client_factory, queries: list[str], clients: int) -> tuple[float, list[float]]:
    per_client = [queries[i::clients] for i in range(clients)]
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        latencies = pool.map(lambda qs: timed(client_factory().search, qs), per_client)
        flat = [x for part in latencies for x in part]
    return len(queries) / (time.perf_counter() - start), flat


def bench_bm25(corpus, queries, args) -> tuple[dict, dict]:
    from agentgym.tools.retrieval.bm25 import BM25Index
    from agentgym.tools.retrieval.client import RetrievalClient
    from agentgym.tools.retrieval.server import ServerThread, create_app

    start = time.perf_counter()
    index = BM25Index(corpus)
    print(f"# bm25s index built in {time.perf_counter() - start:.1f} s", flush=True)
    timed(lambda q: index.search(q, args.k), queries[:50])  # warm up
    local = row("bm25s in-process", len(corpus), timed(lambda q: index.search(q, args.k), queries))
    with ServerThread(create_app(corpus, {"bm25": index})) as server:
        client = RetrievalClient(server.url)
        timed(lambda q: client.search(q, args.k), queries[:50])
        row("bm25s via server, 1 client", len(corpus), timed(lambda q: client.search(q, args.k), queries))
        qps, lat = concurrent_qps(lambda: RetrievalClient(server.url), queries, args.clients)
        row(f"bm25s via server, {args.clients} clients", len(corpus), lat, qps)
    return local, {"index": index}


def bench_rank_bm25(corpus, queries, args) -> dict:
    from rank_bm25 import BM25Okapi

    from agentgym.tools.retrieval.bm25 import _stopwords, tokenize

    n = min(args.rank_docs or len(corpus), len(corpus))
    stop = _stopwords()
    start = time.perf_counter()
    baseline = BM25Okapi([tokenize(t, stop) for t in corpus.index_texts()[:n]])
    print(f"# rank-bm25 index built on {n} docs in {time.perf_counter() - start:.1f} s", flush=True)
    subset = queries[: args.rank_queries]

    def search(q: str) -> None:
        scores = baseline.get_scores(tokenize(q, stop))
        np.argpartition(-scores, args.k)[: args.k]

    seconds = timed(search, subset)
    if n == len(corpus):
        return row("rank-bm25 (BM25Okapi) in-process", n, seconds, note=f"{len(subset)} queries")
    row("rank-bm25 measured on subset", n, seconds, note=f"{len(subset)} queries")
    scale = len(corpus) / n
    extrapolated = [s * scale for s in seconds]
    return row("rank-bm25 extrapolated (linear)", len(corpus), extrapolated,
               note=f"x{scale:.1f} from the {n}-doc measurement")


def bench_dense(corpus, queries, args) -> None:
    from agentgym.tools.retrieval.client import RetrievalClient
    from agentgym.tools.retrieval.corpus import Corpus
    from agentgym.tools.retrieval.dense import DenseIndex, encode, load_model
    from agentgym.tools.retrieval.server import ServerThread, create_app

    start = time.perf_counter()
    load_model()
    print(f"# MiniLM loaded in {time.perf_counter() - start:.1f} s (packaged, offline)", flush=True)
    stride = max(1, len(corpus) // args.dense_docs)  # every type of document, not just the first ones
    subset = Corpus(corpus.documents[::stride][: args.dense_docs], name="dense-subset")
    start = time.perf_counter()
    index = DenseIndex(subset, use_faiss=False)
    took = time.perf_counter() - start
    print(f"# dense: embedded {len(subset)} docs in {took:.1f} s ({len(subset) / took:.0f} docs/s; "
          f"all {len(corpus)} would take ~{len(corpus) / (len(subset) / took) / 60:.0f} min here)", flush=True)
    dq = queries[: args.dense_queries]
    timed(lambda q: index.search(q, args.k), dq)  # warm-up: first use of each input shape is slow
    row("dense in-process (encode+scan)", len(subset), timed(lambda q: index.search(q, args.k), dq),
        note="embedded subset")
    with ServerThread(create_app(subset, {"dense": index})) as server:
        client = RetrievalClient(server.url, method="dense")
        row("dense via server, 1 client", len(subset), timed(lambda q: client.search(q, args.k), dq),
            note="embedded subset")
    vectors = encode(dq)
    tiled = np.ascontiguousarray(np.resize(index.embeddings, (len(corpus), index.embeddings.shape[1])))
    big = DenseIndex(Corpus(corpus.documents[: len(tiled)], name="tiled"), embeddings=tiled, use_faiss=False)
    it = iter(range(len(vectors)))
    row("dense scan only (vectors tiled)", len(tiled),
        timed(lambda q: big.search_vector(vectors[next(it)], args.k), dq), note="query encoding excluded")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100_000, help="documents in the generated corpus")
    parser.add_argument("--queries", type=int, default=1000, help="queries for the BM25 rows")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients for the server row")
    parser.add_argument("--rank-docs", type=int, default=0, help="rank-bm25 on this many docs (0 = all)")
    parser.add_argument("--rank-queries", type=int, default=50)
    parser.add_argument("--dense-docs", type=int, default=1000, help="documents embedded for the dense rows")
    parser.add_argument("--dense-queries", type=int, default=100)
    parser.add_argument("--no-dense", action="store_true")
    args = parser.parse_args(argv)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from agentgym.tools.retrieval.corpus import corpus_from_spec

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    start = time.perf_counter()
    corpus = corpus_from_spec(f"generated:0:{args.docs}")
    queries = make_queries(args.queries, corpus, args.docs)
    print(f"# generated {len(corpus)} documents and {len(queries)} queries in {time.perf_counter() - start:.1f} s; "
          f"mean {statistics.mean(len(t.split()) for t in corpus.index_texts()[::50]):.0f} words/doc, k={args.k}")
    print(f"{'retriever':<34} {'docs':>8} {'p50 ms':>9} {'p99 ms':>9} {'queries/s':>10}  note")
    local, _ = bench_bm25(corpus, queries, args)
    baseline = bench_rank_bm25(corpus, queries, args)
    print(f"# bm25s vs rank-bm25 at {len(corpus)} docs: {local['qps'] / baseline['qps']:.0f}x throughput "
          f"(target >= 20x); bm25s p50 {local['p50']:.3f} ms (target < 5 ms)")
    if not args.no_dense:
        bench_dense(corpus, queries, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
