"""A Text space for any UTF-8 string up to a length.

Gymnasium's own `Text` space only admits a fixed alphanumeric charset, which rejects
almost every real observation (punctuation, newlines, unicode).
"""
from __future__ import annotations

from typing import Any

from gymnasium.spaces import Space

_SAMPLE_ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?'\"()<>{}[]/_-\n"


class Text(Space[str]):
    """Any `str` of at most `max_length` characters that encodes to UTF-8."""

    def __init__(self, max_length: int = 1_000_000, seed: int | None = None):
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        self.max_length = int(max_length)
        super().__init__(dtype=str, seed=seed)

    def contains(self, x: Any) -> bool:
        if not isinstance(x, str) or len(x) > self.max_length:
            return False
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        picks = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in picks)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Text(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Text) and other.max_length == self.max_length

    def to_jsonable(self, sample_n):  # gymnasium serialisation hooks
        return list(sample_n)

    def from_jsonable(self, sample_n):
        return list(sample_n)


