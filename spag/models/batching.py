"""Rows of similar length batched together, so that a batch padded to its longest row computes little
padding, and the beginning a batch's rows share (encoded once where rows begin alike).

On a CPU every padded position costs as much as a real one (the matrix products run over all of them), so
the training forward pass and the benchmark's scoring split a padded batch into such groups; the numbers
are the same up to float rounding (docs/benchmarks.md has the time it saves).
"""

from __future__ import annotations

from collections.abc import Sequence

PADDING_SLACK = 0.1  # a group's padded size may exceed its real tokens by this share (plus MIN_TOKENS)
MIN_TOKENS = 32  # ... and by this many tokens, so that very short rows still share a group


def length_groups(lengths: Sequence[int], slack: float = PADDING_SLACK) -> list[list[int]]:
    """The indices of ``lengths`` in groups, longest first: each group padded to its longest row holds at
    most ``(1 + slack)`` times its real tokens plus ``MIN_TOKENS``. Every index is in exactly one group."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups:
            group = groups[-1]
            longest = lengths[group[0]]
            real = sum(lengths[j] for j in group) + lengths[i]
            if longest * (len(group) + 1) <= (1 + slack) * real + MIN_TOKENS:
                group.append(i)
                continue
        groups.append([i])
    return groups


def shared_prefix_length(encoded: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all of ``encoded`` share, leaving each at least one token of its own
    (0 for fewer than two sequences: nothing is gained by sharing)."""
    if len(encoded) < 2:
        return 0
    limit = min(len(ids) for ids in encoded) - 1
    first = encoded[0]
    n = 0
    while n < limit and all(ids[n] == first[n] for ids in encoded):
        n += 1
    return n
