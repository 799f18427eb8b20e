"""textkit: small text utilities (a mini repository for fast SWE env tests)."""
from textkit.core import count_words, is_palindrome, slugify, title_case, truncate, wrap

__all__ = ["count_words", "is_palindrome", "slugify", "title_case", "truncate", "wrap"]
