"""Loaders for real QA sets in the common JSONL layouts, so the env runs on Wikipedia + NQ/HotpotQA.

A question line holds `question` and the golden answers under `golden_answers` (Search-R1/FlashRAG),
`answers` (NQ/TriviaQA) or `answer` (HotpotQA); each may be a string or a list of strings. `id` (or
`_id`) names it; `supporting_doc_ids` (optional) names the documents that support it. Documents are
loaded by `agentgym.tools.retrieval.corpus.load_corpus` (id/title/text or Search-R1 `contents`).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from agentgym.envs.search.questions import Question
from agentgym.errors import ConfigError
from agentgym.tools.retrieval.corpus import load_corpus, read_jsonl

ANSWER_KEYS = ("golden_answers", "answers", "answer")

__all__ = ["load_corpus", "load_qa", "parse_question"]


def _answers(obj: dict[str, Any], line_no: int) -> tuple[str, ...]:
    for key in ANSWER_KEYS:
        if key in obj:
            value = obj[key]
            values = [value] if isinstance(value, (str, int, float)) else value
            if isinstance(values, dict) and "text" in values:  # SQuAD-like {"text": [...]}
                values = values["text"]
            if isinstance(values, list) and values and all(isinstance(v, (str, int, float)) for v in values):
                return tuple(str(v) for v in values)
            raise ConfigError(f"line {line_no}: {key!r} must be a string or a non-empty list of strings")
    raise ConfigError(f"line {line_no}: no golden answers; expected one of {', '.join(ANSWER_KEYS)}")


def parse_question(obj: Any, line_no: int) -> Question:
    if not isinstance(obj, dict) or not isinstance(obj.get("question"), str) or not obj["question"].strip():
        raise ConfigError(f"line {line_no}: a question line must be a JSON object with a 'question' string")
    qid = str(obj.get("id", obj.get("_id", f"q{line_no}")))
    support = tuple(str(s) for s in obj.get("supporting_doc_ids", ()))
    hops = int(obj.get("hops", len(support)))
    return Question(qid, obj["question"].strip(), _answers(obj, line_no), hops, str(obj.get("type", "external")),
                    support)


@lru_cache(maxsize=16)
def load_qa(path: str | Path, limit: int | None = None) -> tuple[Question, ...]:
    """The questions of a JSONL file, in file order (cached per path)."""
    questions = []
    for no, obj in read_jsonl(path):
        questions.append(parse_question(obj, no))
        if limit is not None and len(questions) >= limit:
            break
    if not questions:
        raise ConfigError(f"{path}: no questions found")
    return tuple(questions)
