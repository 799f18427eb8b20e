"""KV caches for the hf policy: preallocated growth, and a store of finished sequences for prefix reuse.

`GrowingLayer` replaces transformers' `DynamicLayer`, which concatenates every layer's whole cache
with each new token: at a few hundred tokens of context that copy cost the CPU as much as the
matmuls. Here the keys and values live in a buffer sized for the prompt plus the longest answer, new
tokens are written in place, and attention reads a view of the filled part.

`PrefixStore` keeps the KV of sequences the policy has already run (prompt + generated tokens), so
that a later prompt starting with any of them - the next turn of the same episode (trajectory
layout), another sample of the same task, the same system prompt - only runs its new tokens. Attention
is causal, so the KV of a sequence's first k tokens depends on those k tokens alone and any common
prefix is reusable. Entries are valid for one set of weights: the policy clears the store when the
weights change.
"""
from __future__ import annotations

import functools
import inspect

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Sequence, TypeVar

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys/values are views of a buffer written in place (no per-token concat)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(int(capacity), 1)
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def preload(self, keys: torch.Tensor, values: torch.Tensor, capacity: int | None = None) -> None:
        """Start from `keys`/`values` [B, H, L, D] (a reused prefix), with room for `capacity` tokens."""
        batch, heads, length, dim = keys.shape
        self.capacity = max(capacity or self.capacity, length, 1)
        self._k = keys.new_zeros((batch, heads, self.capacity, dim))
        self._v = values.new_zeros((batch, heads, self.capacity, values.shape[-1]))
        self._k[:, :, :length] = keys
        self._v[:, :, :length] = values
        self.dtype, self.device, self.is_initialized, self.length = keys.dtype, keys.device, True, length
        self._views()

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.preload(key_states[:, :, :0], value_states[:, :, :0])

    def _views(self) -> None:
        self.keys, self.values = self._k[:, :, :self.length], self._v[:, :, :self.length]

    def _grow(self, needed: int) -> None:
        old_k, old_v, length = self._k, self._v, self.length
        self.preload(old_k[:, :, :length], old_v[:, :, :length], max(needed, 2 * self.capacity))

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            self._grow(end)
        self._k[:, :, self.length:end] = key_states
        self._v[:, :, self.length:end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k, self._v = self._k.index_select(0, indices), self._v.index_select(0, indices)
            self._views()

    def reset(self) -> None:
        self._k = self._v = None
        self.length = 0
        super().reset()


def growing_cache(num_layers: int, capacity: int) -> DynamicCache:
    """A `DynamicCache` (what the model code expects) made of `GrowingLayer`s."""
    cache = DynamicCache()
    cache.layers = [GrowingLayer(capacity) for _ in range(num_layers)]
    cache.layer_class_to_replicate = None
    return cache


@functools.lru_cache(maxsize=None)
def _cache_arg_of(forward: Any) -> str:
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_kwarg(model: Any, cache: Any) -> dict[str, Any]:
    """`{name: cache}` for a model call. transformers renamed `past_key_values` to `cache` (after 5.19; from then on
    the old name warns on every call, into the user's console): pass the name the installed model takes."""
    while callable(getattr(model, "get_base_model", None)):  # a PEFT wrapper forwards **kwargs to the real model
        model = model.get_base_model()
    return {_cache_arg_of(type(model).forward): cache}


def output_cache(out: Any) -> Any:
    """The KV cache a model call returned, under the field name the installed transformers uses."""
    return out.cache if "cache" in getattr(out, "__dataclass_fields__", ()) else out.past_key_values


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two 1-D integer arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = a[:n] != b[:n]
    return int(differ.argmax()) if differ.any() else n


@dataclass
class CachedSequence:
    """The KV of one token sequence: per layer [heads, len, dim] keys and values."""

    tokens: np.ndarray
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class Stored(Protocol):
    """What a `PrefixStore` keeps: something computed for a token sequence, and its size."""

    @property
    def tokens(self) -> np.ndarray: ...

    @property
    def nbytes(self) -> int: ...


S = TypeVar("S", bound=Stored)


class PrefixStore(Generic[S]):
    """Least-recently-used entries computed for token sequences (`CachedSequence`: KV; the rollout trunk's
    hidden states: policies/rollout_trunk.py), within a byte budget; lookup by longest common prefix."""

    def __init__(self, max_bytes: int, min_tokens: int = 8) -> None:
        self.max_bytes, self.min_tokens = int(max_bytes), min_tokens
        self._entries: OrderedDict[int, S] = OrderedDict()
        self._next_key = 0
        self.bytes = 0
        self.hit_tokens = 0    # prompt tokens served from the store (for benchmarks and tests)
        self.miss_tokens = 0   # prompt tokens that had to be run

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def longest(self, prompt: Sequence[int]) -> tuple[int, S | None]:
        """(how many leading tokens of `prompt` some entry covers, that entry); refreshes its recency."""
        if not self._entries:
            return 0, None
        ids = np.asarray(prompt, dtype=np.int64)
        best, best_key = 0, None
        for key, entry in self._entries.items():
            n = common_prefix(ids, entry.tokens)
            if n > best:
                best, best_key = n, key
        if best_key is None or best < self.min_tokens:
            return 0, None
        self._entries.move_to_end(best_key)
        return best, self._entries[best_key]

    def add(self, entry: S) -> None:
        """Keep `entry`; drop entries it extends (it covers them) and the oldest ones over the budget."""
        if len(entry.tokens) < self.min_tokens or entry.nbytes > self.max_bytes:
            return
        covered = [k for k, e in self._entries.items()
                   if len(e.tokens) <= len(entry.tokens) and common_prefix(e.tokens, entry.tokens) == len(e.tokens)]
        for key in covered:
            self.bytes -= self._entries.pop(key).nbytes
        self._entries[self._next_key] = entry
        self._next_key += 1
        self.bytes += entry.nbytes
        while self.bytes > self.max_bytes and len(self._entries) > 1:
            self.bytes -= self._entries.popitem(last=False)[1].nbytes
