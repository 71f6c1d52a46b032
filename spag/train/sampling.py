"""The order of the training rows and their cut into micro-batches, where it is not the HF Trainer's.

- :class:`PromptGroupedSampler` (``group_by_prompt``): batches of rows whose prompts begin alike.
- :class:`TokenBudgetSampler` (``batch_rebalance`` with ``step_tokens``): optimiser steps of about a number of
  tokens, each dealt into micro-batches of balanced cost by transformers' ``BatchRebalanceSampler``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import torch
from transformers.trainer_pt_utils import BatchRebalanceSampler

from spag.train.data import EncodedRows


class PromptGroupedSampler:
    """Training batches of rows whose prompts begin alike (``group_by_prompt``), in a seeded random order.

    The rows are put in the order of their prompts' token ids, so that rows of one prompt layout (the
    attacker's rules, the defender's, a general instruction), and within it the turns of one game, lie side
    by side; that order is cut into batches of ``batch_size`` rows, and the batches (never the rows inside
    them) are shuffled by a generator seeded with ``seed``, a new order each pass. In one CPU process the
    beginning a batch's rows share is then encoded once per step
    (:func:`spag.train.reference.model_forward_logprobs`). Under several processes each batch still goes
    whole to one of them."""

    def __init__(self, encoded: EncodedRows, batch_size: int, seed: int):
        prompts = [
            ids[: len(ids) - n] for ids, n in zip(encoded.input_ids, encoded.completion_lengths, strict=True)
        ]
        order = sorted(range(len(prompts)), key=prompts.__getitem__)
        self.batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)

    def __len__(self) -> int:
        return sum(len(batch) for batch in self.batches)

    def __iter__(self):
        for b in torch.randperm(len(self.batches), generator=self.generator).tolist():
            yield from self.batches[b]


class TokenBudgetSampler(BatchRebalanceSampler):
    """Optimiser steps of about ``step_tokens`` tokens (all processes together), the rows of a step varying
    with their lengths; each step dealt into micro-batches of balanced cost as ``batch_rebalance`` deals a
    step of fixed rows (transformers' ``BatchRebalanceSampler``, whose balancing this class reuses).

    An epoch has a fixed number of steps, ``ceil(tokens of all rows / step_tokens)``, but never more than
    rows // (processes x ``grad_accum``), so that each process has a row for each of its micro-batches. Each
    epoch the rows are shuffled by ``seed`` + epoch (the same order in every process) and dealt: the first
    processes x ``grad_accum`` rows of each step in turn, then each next row to the step that holds the
    fewest tokens so far. A step then holds the epoch's mean (at most ``step_tokens`` unless the cap on
    steps bound), give or take a row: many short rows or a few long ones. With fewer rows than one step's
    micro-batches, rows repeat, as the parent's last step does."""

    def __init__(
        self, lengths: Sequence[int], step_tokens: int, dp_size: int, grad_accum: int, seed: int, rank: int
    ):
        groups = dp_size * grad_accum
        super().__init__(list(lengths), groups, dp_size, grad_accum, shuffle=True, seed=seed, rank=rank)
        self.step_tokens = step_tokens
        steps = min(math.ceil(sum(self.lengths) / step_tokens), len(self.lengths) // groups)
        self.num_global_batches = max(1, steps)

    def __iter__(self):
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.lengths), generator=generator).tolist()
        for step in self.deal(order):
            self.effective_batch_size = len(step)  # the balancing's budget of moves (one per row)
            yield from self._yield_global_batch(step)

    def deal(self, order: list[int]) -> list[list[int]]:
        """The rows of each step of an epoch whose rows come in ``order``."""
        groups = self.dp_size * self.grad_accum
        steps: list[list[int]] = [[] for _ in range(self.num_global_batches)]
        need = groups * len(steps)
        firsts = (order * math.ceil(need / len(order)))[:need]  # rows repeat only where there are too few
        for i, row in enumerate(firsts):
            steps[i % len(steps)].append(row)
        held = [(sum(self.lengths[row] for row in step), s) for s, step in enumerate(steps)]
        heapq.heapify(held)
        for row in order[len(firsts) :]:
            tokens, s = heapq.heappop(held)
            steps[s].append(row)
            heapq.heappush(held, (tokens + self.lengths[row], s))
        return steps
