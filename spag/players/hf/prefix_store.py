"""Keys and values kept between calls: the prompt-prefix store and the in-place cache layer.

:class:`KVStore` keeps the keys and values of recent prompts within a memory budget (least recently used
out first) and finds the longest common token prefix of a new prompt with a kept one, so only what follows
it is encoded (what vLLM calls automatic prefix caching). :func:`buffer_layer_class` is a transformers
cache layer over a preallocated buffer, written in place while decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MIN_PREFIX = 8  # shorter common prefixes are not worth reusing


def common_length(a, b, limit: int) -> int:
    """How many leading tokens the token arrays ``a`` and ``b`` share, at most ``limit``."""
    differ = np.flatnonzero(a[:limit] != b[:limit])
    return int(differ[0]) if len(differ) else limit


@dataclass(eq=False)
class Entry:
    tokens: object  # numpy int64 array: the prompt's token ids
    kv: list  # per layer (keys, values), each (1, heads, len, head_dim)
    nbytes: int
    used: int = 0


@dataclass
class KVStore:
    """Keys and values of recent prompts, found again by longest common token prefix."""

    budget_bytes: int
    entries: list = field(default_factory=list)
    clock: int = 0

    def match(self, tokens) -> tuple[Entry | None, int]:
        best, best_len = None, 0
        for entry in self.entries:
            n = min(len(entry.tokens), len(tokens))
            if n <= best_len:
                continue
            length = common_length(entry.tokens, tokens, n)
            if length > best_len:
                best, best_len = entry, length
        if best is not None:
            self.clock += 1
            best.used = self.clock
        return best, best_len

    def add(self, tokens, kv) -> Entry:
        self.clock += 1
        entry = Entry(tokens, kv, sum(k.nbytes + v.nbytes for k, v in kv), self.clock)
        self.entries.append(entry)
        total = sum(e.nbytes for e in self.entries)
        for old in sorted(self.entries, key=lambda e: e.used):
            if total <= self.budget_bytes or old is entry:
                break
            self.entries.remove(old)
            total -= old.nbytes
        return entry

    def clear(self) -> None:
        self.entries.clear()


def buffer_layer_class():
    """A cache layer over a preallocated buffer (possibly a view of a bigger one), written in place."""
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        def __init__(self, keys, values, length: int):
            super().__init__()
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self._k, self._v, self._length = keys, values, length
            self._views()

        def _views(self) -> None:
            self.keys = self._k[:, :, : self._length]
            self.values = self._v[:, :, : self._length]

        def update(self, key_states, value_states, *args, **kwargs):
            end = self._length + key_states.shape[-2]
            self._k[:, :, self._length : end] = key_states
            self._v[:, :, self._length : end] = value_states
            self._length = end
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._length

        def keep_rows(self, rows) -> None:
            # Copy only the filled part; the buffer keeps its capacity for the tokens still to come
            # (slots past the length are written before attention reads them, so need no zeros).
            k = self._k.new_empty((len(rows),) + tuple(self._k.shape[1:]))
            v = self._v.new_empty((len(rows),) + tuple(self._v.shape[1:]))
            k[:, :, : self._length] = self._k[rows, :, : self._length]
            v[:, :, : self._length] = self._v[rows, :, : self._length]
            self._k, self._v = k, v
            self._views()

    return BufferLayer
