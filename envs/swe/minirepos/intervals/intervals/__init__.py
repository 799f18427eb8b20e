"""intervals: closed integer intervals and a few sequence helpers (a mini repository for fast tests)."""
from intervals.ops import chunk, clamp, find_insert_position, merge, moving_average, overlap, total_length

__all__ = ["chunk", "clamp", "find_insert_position", "merge", "moving_average", "overlap", "total_length"]
