import pytest

from intervals import chunk, clamp, find_insert_position, merge, moving_average, overlap, total_length


def test_merge_overlapping():
    assert merge([(1, 3), (2, 6), (8, 10)]) == [(1, 6), (8, 10)]


def test_merge_touching():
    assert merge([(1, 2), (3, 4)]) == [(1, 4)]


def test_merge_unsorted_and_nested():
    assert merge([(5, 9), (1, 2), (6, 7)]) == [(1, 2), (5, 9)]


def test_merge_empty():
    assert merge([]) == []


def test_overlap():
    assert overlap((1, 5), (3, 9)) == (3, 5)


def test_overlap_single_point():
    assert overlap((1, 3), (3, 4)) == (3, 3)


def test_overlap_none():
    assert overlap((1, 2), (4, 5)) is None


def test_total_length():
    assert total_length([(1, 3), (2, 4), (10, 10)]) == 5


def test_clamp():
    assert [clamp(v, 0, 10) for v in (-5, 0, 5, 10, 15)] == [0, 0, 5, 10, 10]


def test_clamp_bad_bounds():
    with pytest.raises(ValueError):
        clamp(1, 5, 0)


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_chunk_bad_size():
    with pytest.raises(ValueError):
        chunk([1], 0)


def test_moving_average():
    assert moving_average([1, 2, 3, 4, 5], 2) == [1.5, 2.5, 3.5, 4.5]


def test_moving_average_full_window():
    assert moving_average([2, 4, 6], 3) == [4.0]


def test_moving_average_window_too_big():
    assert moving_average([1, 2], 3) == []


@pytest.mark.parametrize("items,value,expected", [([1, 3, 5, 7], 4, 2), ([1, 3, 5, 7], 0, 0), ([1, 3, 5, 7], 9, 4),
                                                  ([1, 2, 2, 2, 3], 2, 1), ([], 1, 0)])
def test_find_insert_position(items, value, expected):
    assert find_insert_position(items, value) == expected
