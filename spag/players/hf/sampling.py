"""Sampling the next token of each row: temperature and top-k, one seeded generator per row."""

from __future__ import annotations


class Sampler:
    """Temperature / top-k sampling with one seeded generator per row (greedy at temperature 0)."""

    def __init__(self, seeds, temperature: float, top_k: int, device, end_ids: list[int]):
        import torch

        self.temperature, self.top_k = temperature, top_k
        self.end_ids = set(end_ids)
        self._end_index = torch.tensor(end_ids, device=device, dtype=torch.long)
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

        logits = logits.float()
        if suppress_end and len(self._end_index):
            logits = logits.index_fill(1, self._end_index, float("-inf"))
        if self.temperature <= 0:
            return logits.argmax(dim=-1)
        logits = logits / self.temperature
        if self.top_k and self.top_k < logits.shape[-1]:
            values, indices = logits.topk(self.top_k, dim=-1)
        else:
            values, indices = logits, None
        probs = values.softmax(dim=-1)
        picks = torch.stack(
            [torch.multinomial(probs[b], 1, generator=self._generators[r])[0] for b, r in enumerate(rows)]
        )
        if indices is not None:
            picks = indices.gather(1, picks[:, None])[:, 0]
        return picks
