"""BM25 index (bm25s) and the corpus loaders."""
from __future__ import annotations

import json

import pytest

from agentgym.errors import ConfigError
from agentgym.tools.retrieval import corpus_from_spec, get_retriever, load_corpus
from agentgym.tools.retrieval.bm25 import BM25Index
from agentgym.tools.retrieval.corpus import Corpus, Document


@pytest.fixture(scope="module")
def corpus():
    return corpus_from_spec("generated:0:small")


def test_an_entity_name_finds_its_own_document_first(corpus):
    index = get_retriever(corpus, "bm25")
    docs = corpus.documents[::5]
    top1 = [index.search(d.title, 3)[0].doc_id == d.id for d in docs]
    assert sum(top1) / len(top1) > 0.97
    assert all(d.id in {h.doc_id for h in index.search(d.title, 3)} for d in docs)


def test_scores_are_sorted_positive_and_k_is_respected(corpus):
    index = get_retriever(corpus, "bm25")
    hits = index.search("city founded river", 7)
    assert len(hits) == 7 and all(h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(index.search("city", 10_000)) <= len(corpus)


@pytest.mark.parametrize("query", ["", "   ", "the of and", "qqqzzz", "\x00\ud800" * 10_000, "x" * 1_000_000])
def test_queries_with_nothing_to_match_return_no_hits(corpus, query):
    assert get_retriever(corpus, "bm25").search(query, 3) == []


def test_ranking_agrees_with_a_hand_computed_bm25():
    docs = [Document("a", "", "red apple red"), Document("b", "", "green apple"), Document("c", "", "blue sky")]
    index = BM25Index(Corpus(docs))
    hits = index.search("red apple", 3)
    assert [h.doc_id for h in hits] == ["a", "b"]  # c shares no term: not returned
    # Lucene BM25 (as Lucene >= 8, without the rank-neutral (k1 + 1) factor):
    # idf = ln(1 + (N - df + .5) / (df + .5)), tf = f / (f + k1 (1 - b + b dl / avgdl)), avgdl = 7/3
    import math
    idf_red, idf_apple = math.log(1 + 2.5 / 1.5), math.log(1 + 1.5 / 2.5)
    tf = lambda f, dl: f / (f + 1.5 * (0.25 + 0.75 * dl / (7 / 3)))  # noqa: E731
    assert hits[0].score == pytest.approx(idf_red * tf(2, 3) + idf_apple * tf(1, 3), rel=1e-5)
    assert hits[1].score == pytest.approx(idf_apple * tf(1, 2), rel=1e-5)


def test_disk_cache_round_trips(corpus, tmp_path):
    built = BM25Index(corpus, cache_dir=tmp_path)
    assert any(tmp_path.iterdir())
    loaded = BM25Index(corpus, cache_dir=tmp_path)
    for q in ["Kigel Orchestra", "violinist born 1754", "capital"]:
        assert loaded.search(q, 5) == built.search(q, 5)


def test_process_wide_cache_builds_once(corpus):
    assert get_retriever(corpus, "bm25") is get_retriever(corpus_from_spec("generated:0:small"), "bm25")


def test_jsonl_layouts(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join([json.dumps({"id": 7, "title": "T", "text": "body"}),
                               json.dumps({"_id": "x", "contents": '"Quoted Title"\nsecond line'}),
                               json.dumps({"contents": "no title line"}), ""]))
    c = load_corpus(path)
    assert [(d.id, d.title, d.text) for d in c.documents] == [("7", "T", "body"), ("x", "Quoted Title", "second line"),
                                                             ("3", "", "no title line")]


@pytest.mark.parametrize("lines, message", [(['{"id": 1}'], "neither 'text' nor 'contents'"), (["{oops"], "not valid JSON"),
                                            (['{"id": 1, "text": "a"}', '{"id": 1, "text": "b"}'], "duplicate"),
                                            (["[1, 2]"], "must be a JSON object")])
def test_bad_corpus_files_name_the_problem(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines))
    with pytest.raises(ConfigError, match=message):
        load_corpus(path)


def test_bad_specs():
    with pytest.raises(ConfigError, match="no such file"):
        corpus_from_spec("/nonexistent.jsonl")
    with pytest.raises(ConfigError, match="generated:SEED"):
        corpus_from_spec("generated:abc")
    with pytest.raises(ConfigError, match="unknown retrieval method"):
        get_retriever(None, "splade")


def test_a_registered_corpus_source_serves_its_specs():
    """Env families hand their corpora to the retrieval tools by name (the search env's `generated`)."""
    from agentgym.tools.retrieval import register_corpus_source

    register_corpus_source("test-letters", lambda arg: Corpus([Document(c, c.upper(), f"letter {c}") for c in arg],
                                                              name=f"test-letters:{arg}"))
    corpus = corpus_from_spec("test-letters:abc")
    assert corpus.name == "test-letters:abc" and [d.title for d in corpus.documents] == ["A", "B", "C"]
    assert corpus_from_spec("generated:0:tiny").name == "generated:0:tiny"
