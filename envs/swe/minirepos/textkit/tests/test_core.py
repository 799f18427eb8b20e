import pytest

from textkit import count_words, is_palindrome, slugify, title_case, truncate, wrap


def test_count_words():
    assert count_words("The cat and the hat") == {"the": 2, "cat": 1, "and": 1, "hat": 1}


def test_count_words_min_length():
    assert count_words("a bb ccc bb", min_length=2) == {"bb": 2, "ccc": 1}


def test_count_words_apostrophes():
    assert count_words("'tis the cat's toy") == {"tis": 1, "the": 1, "cat's": 1, "toy": 1}


def test_title_case():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_title_case_small_word_last():
    assert title_case("what is it for") == "What Is It For"


def test_truncate_short_text_unchanged():
    assert truncate("hello", 5) == "hello"


def test_truncate_cuts():
    assert truncate("hello world", 8) == "hello..."


def test_truncate_custom_ellipsis():
    assert truncate("abcdefgh", 4, ellipsis="~") == "abc~"


def test_truncate_width_too_small():
    with pytest.raises(ValueError):
        truncate("hello", 2)


def test_wrap():
    assert wrap("one two three four five", 9) == ["one two", "three", "four five"]


def test_wrap_exact_width():
    assert wrap("ab cd ef", 5) == ["ab cd", "ef"]


def test_wrap_long_word():
    assert wrap("tiny enormousword x", 6) == ["tiny", "enormousword", "x"]


def test_slugify():
    assert slugify("Hello, World! 2024") == "hello-world-2024"


def test_slugify_separator():
    assert slugify("A B C", separator="_") == "a_b_c"


@pytest.mark.parametrize("text,expected", [("Racecar", True), ("A man, a plan, a canal: Panama", True),
                                           ("abca", False), ("", True), ("ab", False)])
def test_is_palindrome(text, expected):
    assert is_palindrome(text) is expected
