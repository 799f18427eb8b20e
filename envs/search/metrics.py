"""Answer metrics: exact match and token F1 after SQuAD normalisation (lowercase, no punctuation,
no articles, single spaces), each the best over the golden answers. Pure functions."""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Sequence

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def exact_match(prediction: str, golden: Sequence[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golden))


def f1_score(prediction: str, golden: Sequence[str]) -> float:
    pred = normalize_answer(prediction).split()
    best = 0.0
    for answer in golden:
        gold = normalize_answer(answer).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if common:
            precision, recall = common / len(pred), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
        elif not pred and not gold:
            best = max(best, 1.0)
    return best
