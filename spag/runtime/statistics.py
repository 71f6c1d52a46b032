"""Intervals clustered by target word: every game of one word is resampled together; and across seeds.

Games of one word are alike (the same word is easy or hard for every model, in both roles and for every
seed), so treating games as independent would make intervals too narrow. Every interval here is a 95%
percentile bootstrap over words (scipy's ``bootstrap``), or, across training runs, over words and runs
at once (:func:`two_way_mean`).

Inputs are per-word sums and counts: a quantity's value is ``sum(sums) / sum(counts)`` (a rate or a mean
over games), which weights each word by its number of games, as the point estimate does.

Where each seed gives one number (a run's exploitability), :func:`t_interval` gives the mean over seeds with
Student's t interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000


def _entry(value: float, low: float, high: float, games: int, words: int) -> dict:
    # A resample can be all-equal: the interval then collapses on the value.
    low = value if not np.isfinite(low) else min(float(low), value)
    high = value if not np.isfinite(high) else max(float(high), value)
    return {"value": value, "low": low, "high": high, "games": games, "words": words}


def clustered_mean(
    sums: Sequence[float],
    counts: Sequence[float],
    *,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    n_resamples: int = RESAMPLES,
) -> dict:
    """Sum over sum of per-word ``sums`` and ``counts``, with a bootstrap interval over words.

    ``{value, low, high, games, words}``; with fewer than two words the interval is the whole range of a
    rate, ``[0, 1]``.
    """
    from scipy.stats import bootstrap

    sums, counts = np.asarray(sums, dtype=float), np.asarray(counts, dtype=float)
    games = int(counts.sum())
    value = float(sums.sum() / games) if games else 0.0
    if len(sums) < 2 or games == 0:
        return {"value": value, "low": 0.0, "high": 1.0, "games": games, "words": len(sums)}

    def ratio(s, n, axis=-1):
        return s.sum(axis=axis) / n.sum(axis=axis)

    result = bootstrap(
        (sums, counts),
        ratio,
        paired=True,
        vectorized=True,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return _entry(value, low, high, games, len(sums))


def paired_difference(
    a: Mapping[str, tuple[float, float]],
    b: Mapping[str, tuple[float, float]],
    *,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    n_resamples: int = RESAMPLES,
) -> dict:
    """``mean(a) - mean(b)`` on the words both have, with a bootstrap interval over those words.

    ``a`` and ``b`` map a word to ``(sum, count)`` of one quantity for two arms measured on the same
    words (and seeds): resampling a word takes both arms' games of it, so what the words share cancels.
    Returns ``{value, low, high, games, words}`` with ``games`` the pairs' games of ``a``.
    """
    from scipy.stats import bootstrap

    words = sorted(set(a) & set(b))
    sa, na = (np.array([a[w][i] for w in words], dtype=float) for i in (0, 1))
    sb, nb = (np.array([b[w][i] for w in words], dtype=float) for i in (0, 1))
    keep = (na > 0) & (nb > 0)
    sa, na, sb, nb = sa[keep], na[keep], sb[keep], nb[keep]
    if not keep.any():
        return {"value": 0.0, "low": -1.0, "high": 1.0, "games": 0, "words": 0}
    value = float(sa.sum() / na.sum() - sb.sum() / nb.sum())
    if len(sa) < 2:
        return {"value": value, "low": -1.0, "high": 1.0, "games": int(na.sum()), "words": len(sa)}

    def difference(s1, n1, s2, n2, axis=-1):
        return s1.sum(axis=axis) / n1.sum(axis=axis) - s2.sum(axis=axis) / n2.sum(axis=axis)

    result = bootstrap(
        (sa, na, sb, nb),
        difference,
        paired=True,
        vectorized=True,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return _entry(value, low, high, int(na.sum()), len(sa))


def two_way_mean(
    table: np.ndarray,
    counts: np.ndarray | None = None,
    *,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    n_resamples: int = RESAMPLES,
) -> dict:
    """The mean effect over runs (rows) and words (columns), with a bootstrap over both at once.

    ``table[r, w]``: the effect's per-word sum in run ``r`` (for instance a paired score difference
    times the word's games), ``counts[r, w]`` its games (default 1). Each resample draws runs and words
    with replacement, independently, so the interval covers both the training seed's and the evaluation
    words' variation: what a claim "over seeds, on words like these" needs. Also returns the per-run
    values and ``runs``.
    """
    table = np.asarray(table, dtype=float)
    counts = np.ones_like(table) if counts is None else np.asarray(counts, dtype=float)
    runs, words = table.shape
    value = float(table.sum() / counts.sum())
    per_run = [float(table[r].sum() / counts[r].sum()) for r in range(runs)]
    rng = np.random.default_rng(seed)
    draws = np.empty(n_resamples)
    for i in range(n_resamples):
        r = rng.integers(0, runs, runs)
        w = rng.integers(0, words, words)
        sub_counts = counts[np.ix_(r, w)].sum()
        draws[i] = table[np.ix_(r, w)].sum() / sub_counts if sub_counts else np.nan
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(draws, [alpha, 1 - alpha]) if runs * words > 1 else (np.nan, np.nan)
    entry = _entry(value, low, high, int(counts.sum()), words)
    return {**entry, "runs": runs, "per_run": per_run}


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> dict:
    """The mean of ``values`` (one per seed) and its t interval (n - 1 degrees of freedom): ``{mean, low,
    high, n}``, ``low`` and ``high`` None for a single value."""
    from scipy.stats import t

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n}
    half = float(t.ppf((1 + confidence) / 2, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}
