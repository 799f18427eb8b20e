from hypothesis import given
from hypothesis import strategies as st

from agentgym.spaces import Text

ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())


def test_admits_what_gymnasiums_text_rejects():
    space = Text(100)
    for text in ("", "Hello, world!\n", "<tool_call>{\"a\": [1]}</tool_call>", "日本語 🤖", "\x00\x1b"):
        assert space.contains(text), text


def test_rejects_non_str_too_long_and_lone_surrogates():
    space = Text(5)
    assert not space.contains("123456")
    assert space.contains("12345")
    assert not space.contains(b"abc")
    assert not space.contains(None)
    assert not space.contains("a\ud800")


def test_sample_is_inside_and_seeded():
    a, b = Text(50, seed=3), Text(50, seed=3)
    samples = [a.sample() for _ in range(20)]
    assert samples == [b.sample() for _ in range(20)]
    assert all(a.contains(s) for s in samples)
    assert len(set(samples)) > 1


def test_equality_and_repr():
    assert Text(10) == Text(10) and Text(10) != Text(11)
    assert repr(Text(7)) == "Text(max_length=7)"
    assert not Text(3).is_np_flattenable


@given(st.text(alphabet=ANY_CHAR, max_size=60))
def test_contains_iff_utf8_encodable(text):
    try:
        text.encode("utf-8")
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    assert Text(60).contains(text) == encodable
