"""Sampling the next token of each row: temperature and top-k, each row with its own seed.

Two samplers draw the same distribution; each keeps a row's tokens independent of the rows that share its
batch, so a game says what it would have said alone:

- :class:`Sampler` (``sampler: per-row``): one seeded ``torch.Generator`` per row and one
  ``torch.multinomial`` call per row and step;
- :class:`CounterSampler` (``sampler: counter``): every row at once, by the Gumbel-max rule, with noise that
  is a hash of the row's seed, the row's step and the token id (a counter-based generator): one call for the
  whole batch and nothing read back to the host, for a GPU. Its draws differ from the per-row sampler's.
  The player decodes with it in the loop that keeps the tokens on the device
  (:mod:`spag.players.hf.ledger`), reading them back every few steps.
"""

from __future__ import annotations

import os

from spag.players.options import SAMPLERS

AUTO, PER_ROW, COUNTER = SAMPLERS

# splitmix64's constants, as signed 64-bit integers (torch's int64 arithmetic wraps around).
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)


def sampler_for(choice: str, device) -> str:
    """The sampler ``choice`` names (``auto``: counter on a GPU, per-row elsewhere)."""
    if choice == AUTO:
        return COUNTER if str(device).startswith("cuda") else PER_ROW
    return choice


def make_sampler(choice: str, seeds, temperature: float, top_k: int, device, end_ids: list[int]):
    """The sampler ``choice`` names, for rows with these ``seeds``."""
    kind = Sampler if sampler_for(choice, device) == PER_ROW else CounterSampler
    return kind(seeds, temperature, top_k, device, end_ids)


class _RowSampler:
    """What both samplers share: the settings, the end-of-turn ids, and the logits made ready for a draw
    (float32, the end of turn suppressed before the minimum length, divided by the temperature)."""

    def __init__(self, temperature: float, top_k: int, device, end_ids: list[int]):
        import torch

        self.temperature, self.top_k = temperature, top_k
        self.end_ids = set(end_ids)
        self.end_index = torch.tensor(end_ids, device=device, dtype=torch.long)

    def _ready(self, logits, suppress_end: bool):
        logits = logits.float()
        if suppress_end and len(self.end_index):
            logits = logits.index_fill(1, self.end_index, float("-inf"))
        return logits

    def _top_k(self, logits):
        """(values, indices) of the top k logits of each row, or (logits, None) where top-k keeps them all."""
        if self.top_k and self.top_k < logits.shape[-1]:
            return logits.topk(self.top_k, dim=-1)
        return logits, None


class Sampler(_RowSampler):
    """Temperature / top-k sampling with one seeded generator per row (greedy at temperature 0)."""

    def __init__(self, seeds, temperature: float, top_k: int, device, end_ids: list[int]):
        import torch

        super().__init__(temperature, top_k, device, end_ids)
        self._generators = []
        for s in seeds:
            g = torch.Generator(device=device)
            if s is None:
                g.seed()
            else:
                g.manual_seed(int(s))
            self._generators.append(g)

    def sample(self, logits, rows: list[int], suppress_end: bool):
        import torch

        logits = self._ready(logits, suppress_end)
        if self.temperature <= 0:
            return logits.argmax(dim=-1)
        values, indices = self._top_k(logits / self.temperature)
        probs = values.softmax(dim=-1)
        picks = torch.stack(
            [torch.multinomial(probs[b], 1, generator=self._generators[r])[0] for b, r in enumerate(rows)]
        )
        if indices is not None:
            picks = indices.gather(1, picks[:, None])[:, 0]
        return picks


def _mix(x):
    """splitmix64's finaliser on an int64 tensor (logical right shifts, wrapping products)."""
    x = x ^ ((x >> 30) & ((1 << 34) - 1))
    x = x * _MIX1
    x = x ^ ((x >> 27) & ((1 << 37) - 1))
    x = x * _MIX2
    return x ^ ((x >> 31) & ((1 << 33) - 1))


def counter_uniform(seeds, steps, tokens):
    """Uniform noise in (0, 1), float64, of shape ``tokens``: a hash of each row's seed and step (``seeds``,
    ``steps``: int64 of shape (rows, 1)) and the token id. The same three numbers give the same value on any
    device and in any batch."""
    import torch

    key = _mix(_mix(seeds + steps * _GOLDEN) + tokens * _GOLDEN)
    bits = (key >> 11) & ((1 << 53) - 1)  # 53 random bits: a float64's mantissa
    return (bits.to(torch.float64) + 0.5) / float(1 << 53)


class CounterSampler(_RowSampler):
    """Temperature / top-k sampling of every row in one call (Gumbel-max), with counter-based noise: a row's
    draw at its n-th step depends on its seed, n, the logits and nothing else (greedy at temperature 0)."""

    def __init__(self, seeds, temperature: float, top_k: int, device, end_ids: list[int]):
        import torch

        super().__init__(temperature, top_k, device, end_ids)
        drawn = [int(s) if s is not None else int.from_bytes(os.urandom(7), "little") for s in seeds]
        self._seeds = torch.tensor(drawn, dtype=torch.long, device=device)
        self._steps = torch.zeros(len(drawn), dtype=torch.long, device=device)
        self._rows: tuple[list[int], object] | None = None

    def _index(self, rows: list[int]):
        import torch

        if self._rows is None or self._rows[0] != rows:  # copied to the device when the batch changes only
            self._rows = (list(rows), torch.tensor(rows, dtype=torch.long, device=self._seeds.device))
        return self._rows[1]

    def sample(self, logits, rows: list[int], suppress_end: bool):
        import torch

        logits = self._ready(logits, suppress_end)
        if self.temperature <= 0:
            return logits.argmax(dim=-1)
        index = self._index(rows)
        values, tokens = self._top_k(logits / self.temperature)
        if tokens is None:
            tokens = torch.arange(logits.shape[-1], device=logits.device)[None]
        noise = counter_uniform(self._seeds[index][:, None], self._steps[index][:, None], tokens)
        gumbel = -torch.log(-torch.log(noise))
        picks = (values.double() + gumbel).argmax(dim=-1)
        self._steps[index] += 1
        return tokens.expand_as(values).gather(1, picks[:, None])[:, 0]
