"""Word counts, casing, truncation and wrapping."""
import re

SMALL_WORDS = {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"}


def count_words(text, min_length=1):
    """Map each lower-cased word of at least `min_length` letters to how often it occurs."""
    counts = {}
    for word in re.findall(r"[a-zA-Z']+", text):
        word = word.lower().strip("'")
        if len(word) >= min_length:
            counts[word] = counts.get(word, 0) + 1
    return counts


def title_case(text):
    """Capitalise each word except small words, which stay lower case unless they come first or last."""
    words = text.split()
    out = []
    for i, word in enumerate(words):
        if 0 < i < len(words) - 1 and word.lower() in SMALL_WORDS:
            out.append(word.lower())
        else:
            out.append(word[:1].upper() + word[1:].lower())
    return " ".join(out)


def truncate(text, width, ellipsis="..."):
    """Cut `text` to at most `width` characters, ending with `ellipsis` when something was cut."""
    if width < len(ellipsis):
        raise ValueError("width must be at least the length of the ellipsis")
    if len(text) <= width:
        return text
    return text[: width - len(ellipsis)] + ellipsis


def wrap(text, width):
    """Greedy word wrap: lines of at most `width` characters (longer words get a line of their own)."""
    lines, current = [], ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = current + " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def slugify(text, separator="-"):
    """Lower-case ASCII words joined by `separator`."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return separator.join(words)


def is_palindrome(text):
    """Whether the letters and digits of `text` read the same backwards (case-insensitive)."""
    chars = [c.lower() for c in text if c.isalnum()]
    left, right = 0, len(chars) - 1
    while left < right:
        if chars[left] != chars[right]:
            return False
        left += 1
        right -= 1
    return True
