"""Keys and values kept between calls: the prompt-prefix store and the in-place cache layer.

:class:`KVStore` keeps the keys and values of recent prompts within a memory budget (least recently used
out first) and finds the longest common token prefix of a new prompt with a kept one, so only what follows
it is encoded (what vLLM calls automatic prefix caching). :func:`buffer_layer_class` is a transformers
cache layer over a preallocated buffer, written in place while decoding, and :func:`copy_kept_prefixes` fills
such buffers from kept entries.
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


def copy_kept_prefixes(buffers, rows, shared: int, end: int, *, at_once: bool) -> None:
    """Each row's own kept prefix, tokens ``shared`` to ``c`` of its entry, into the row's slots of the
    decode buffers that end at ``end``. ``rows`` are (row, :class:`Entry`, c); ``buffers`` are per layer
    (keys, values), each (rows, heads, capacity, head_dim).

    ``at_once`` (on a GPU): one gather and one scatter per layer for the keys and one for the values,
    whatever the rows, where a copy per row and layer is thousands of kernel launches a prefill. Otherwise
    a copy per row and layer, one pass over the bytes where the gather and scatter take two: on a CPU, where
    no launch costs, that measured faster (docs/gpu.md)."""
    import torch

    if not rows:
        return
    if not at_once:
        for b, entry, c in rows:
            slots = slice(end - (c - shared), end)
            for (kb, vb), (k, v) in zip(buffers, entry.kv):
                kb[b, :, slots], vb[b, :, slots] = k[0, :, shared:c], v[0, :, shared:c]
        return
    device = buffers[0][0].device
    lengths = [c - shared for _, _, c in rows]
    row_index = torch.from_numpy(np.repeat([b for b, _, _ in rows], lengths)).to(device)
    slot_index = torch.from_numpy(np.concatenate([np.arange(end - n, end) for n in lengths])).to(device)
    for layer, pair in enumerate(buffers):
        for part, buffer in enumerate(pair):  # keys, then values
            kept = torch.cat([entry.kv[layer][part][0, :, shared:c] for _, entry, c in rows], dim=1)
            buffer[row_index, :, slot_index] = kept.transpose(0, 1).to(buffer.dtype)


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
