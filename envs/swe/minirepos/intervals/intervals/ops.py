"""Operations on closed intervals (start, end) and on sorted sequences."""


def merge(intervals):
    """Merge overlapping or touching intervals; the result is sorted by start."""
    result = []
    for start, end in sorted(intervals):
        if result and start <= result[-1][1] + 1:
            result[-1] = (result[-1][0], max(result[-1][1], end))
        else:
            result.append((start, end))
    return result


def overlap(a, b):
    """The intersection of two intervals, or None if they do not meet."""
    start = max(a[0], b[0])
    end = min(a[1], b[1])
    if start > end:
        return None
    return (start, end)


def total_length(intervals):
    """How many integers the intervals cover together."""
    return sum(end - start + 1 for start, end in merge(intervals))


def clamp(value, low, high):
    """`value` limited to [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    if value < low:
        return low
    if value > high:
        return high
    return value


def chunk(items, size):
    """Split a list into consecutive pieces of `size` items (the last may be shorter)."""
    if size < 1:
        raise ValueError("size must be positive")
    return [items[i:i + size] for i in range(0, len(items), size)]


def moving_average(values, window):
    """Means of each run of `window` consecutive values."""
    if window < 1 or window > len(values):
        return []
    total = sum(values[:window])
    out = [total / window]
    for i in range(window, len(values)):
        total += values[i] - values[i - window]
        out.append(total / window)
    return out


def find_insert_position(sorted_items, value):
    """The leftmost index at which `value` can be inserted keeping `sorted_items` sorted."""
    low, high = 0, len(sorted_items)
    while low < high:
        mid = (low + high) // 2
        if sorted_items[mid] < value:
            low = mid + 1
        else:
            high = mid
    return low
