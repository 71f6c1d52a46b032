"""Is B better than A? Paired statistics over the per-item results of two benchmark runs.

Both checkpoints answered the same items, so every comparison is paired, per benchmark and pooled over
all the items of all benchmarks:

- **paired bootstrap**: each resample draws items with replacement within each benchmark, the same items
  for A and for B, and recomputes each benchmark's accuracy, the pooled accuracy (every item counts
  once) and the geometric mean over benchmarks. The 95% interval of B - A is the 2.5th to 97.5th
  percentile of the resampled differences.
- **exact McNemar test**: only the discordant items carry information about B - A: ``b`` items B got
  right and A wrong, ``c`` the reverse. Under "no difference" each discordant item is a fair coin, so
  the two-sided p-value is that of ``b`` successes in ``b + c`` trials at 1/2
  (``scipy.stats.binomtest``). It needs right/wrong scores; a benchmark with fractional ones has none.
- **minimum detectable effect** (MDE): the smallest true difference the comparison would find with 80%
  power at two-sided level 0.05, given the items used and the observed share of discordant items ψ.
  For a paired comparison of proportions (Connor 1987) with ``n`` items, a difference δ is detected
  with power 1 - β when ``√n·|δ| = z(1-α/2)·√ψ + z(1-β)·√(ψ - δ²)``; the MDE is the δ that solves it
  (≈ 2.8·√(ψ/n) for small δ). ψ is (b + c)/n, at least 1/n. With ψ = 3%, 300 items give 2.8 points;
  1,500 give 1.2.

A group benchmark such as MMLU is resampled over all its items together, so its resampled score is the
size-weighted mean that lm-eval reports. Only items present in both runs are compared. An interval that
excludes 0 (or p < 0.05) says the difference is unlikely to come from the choice of items; it says
nothing about training noise: another training seed can still move the score.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from spag.evaluate.benchmark import samples_path
from spag.runtime.errors import DataError
from spag.runtime.records import read_records, read_text


def read_benchmark(path: str | os.PathLike) -> tuple[dict, dict[str, dict[tuple[str, int], float]]]:
    """(metrics, {benchmark: {(task, doc_id): correct}}) of a ``spag benchmark`` output."""
    path = Path(path)
    try:
        metrics = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(path, None, f"not valid JSON (line {exc.lineno}: {exc.msg})")
    if not isinstance(metrics, dict) or not isinstance(metrics.get("tasks"), dict):
        raise DataError(path, None, "not a benchmark result (no 'tasks')")
    samples_file = _samples_file(path, metrics)
    if not samples_file.exists():
        raise DataError(samples_file, None, f"per-sample results of {path} not found")
    if samples_file.is_dir():
        raise DataError(samples_file, None, f"is a directory, expected the per-sample results file of {path}")
    per_benchmark: dict[str, dict[tuple[str, int], float]] = {}
    first_seen: dict[tuple[str, int], int] = {}
    for i, record in enumerate(read_records(samples_file)):
        try:
            key = (str(record["task"]), _doc_id(record["doc_id"]))
            correct = float(record["correct"])
            benchmark = str(record.get("benchmark", record["task"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(samples_file, i, f"needs task, doc_id and a numeric correct ({exc})")
        if not (math.isfinite(correct) and 0 <= correct <= 1):
            raise DataError(
                samples_file, i, f"correct is {record['correct']!r}: a score is a number from 0 to 1"
            )
        if (
            key in first_seen
        ):  # which of the two answers counts is not known: keeping either changes the result
            raise DataError(
                samples_file,
                i,
                f"{key[0]} doc_id {key[1]} again (first in record {first_seen[key]}): "
                "each document is scored once",
            )
        first_seen[key] = i
        per_benchmark.setdefault(benchmark, {})[key] = correct
    return metrics, per_benchmark


def _doc_id(value) -> int:
    """A document's number: an integer (or its text), never a fraction cut to one."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"doc_id {value!r} is not an integer")
    return int(value)


def mcnemar(a: np.ndarray, b: np.ndarray) -> dict | None:
    """The exact McNemar test of right/wrong results ``a`` and ``b`` of the same items: the discordant
    counts and the two-sided p-value (None when a score is not 0 or 1)."""
    from scipy.stats import binomtest

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not (np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()):
        return None
    b_better, a_better = int(((b == 1) & (a == 0)).sum()), int(((a == 1) & (b == 0)).sum())
    p = 1.0 if b_better + a_better == 0 else float(binomtest(b_better, b_better + a_better, 0.5).pvalue)
    return {"b_better": b_better, "a_better": a_better, "p": p}


def minimum_detectable_effect(n: int, discordant: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest |B - A| a paired comparison of ``n`` right/wrong items detects with ``power`` at
    two-sided level ``alpha``, when a share ψ = discordant / n of items (at least 1/n) is discordant:
    the δ with √n·δ = z(1-α/2)·√ψ + z(power)·√(ψ - δ²) (Connor 1987; see the module docstring)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    psi = max(discordant, 1) / n
    z_alpha, z_power = norm.ppf(1 - alpha / 2), norm.ppf(power)

    def gap(delta: float) -> float:
        return np.sqrt(n) * delta - z_alpha * np.sqrt(psi) - z_power * np.sqrt(max(psi - delta * delta, 0.0))

    if gap(np.sqrt(psi)) < 0:  # not even a difference as large as ψ allows is detectable
        return float(np.sqrt(psi))
    return float(brentq(gap, 0.0, np.sqrt(psi)))


def _samples_file(path: Path, metrics: dict) -> Path:
    """The per-sample results a benchmark result names (``samples_file``), or the default beside it."""
    named = metrics.get("samples_file")
    return path.parent / named if isinstance(named, str) and named else samples_path(path)


def samples_files(path: str | os.PathLike, name: str) -> dict[str, Path]:
    """``{"NAME's samples": file}``: the per-sample file a comparison reads for the result ``path`` (for
    the check that no output is written over an input; an unreadable result names the default)."""
    path = Path(path)
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        metrics = {}
    return {f"{name}'s samples": _samples_file(path, metrics if isinstance(metrics, dict) else {})}


def _difference(point_a: float, point_b: float, low: float, high: float, items=None) -> dict:
    """B - A with its interval; with the per-item scores ``items`` (A's, B's) also McNemar's test and the
    minimum detectable effect."""
    out = {
        "a": point_a,
        "b": point_b,
        "diff": point_b - point_a,
        "diff_low": float(low),
        "diff_high": float(high),
        "excludes_zero": bool(low > 0 or high < 0),
    }
    if items is not None:
        va, vb = items
        out["n"] = int(va.size)
        test = mcnemar(va, vb)
        if test is not None:
            out.update(
                b_better=test["b_better"],
                a_better=test["a_better"],
                p_mcnemar=test["p"],
                mde=minimum_detectable_effect(va.size, test["b_better"] + test["a_better"]),
            )
    return out


def paired_bootstrap(
    a: Mapping[str, np.ndarray],
    b: Mapping[str, np.ndarray],
    resamples: int = 2000,
    seed: int = 0,
    chunk: int = 100,
) -> dict:
    """B - A per benchmark, pooled over all items and for the geometric mean, with 95% percentile
    intervals; per benchmark and pooled also the exact McNemar test and the minimum detectable effect.

    ``a[name]`` and ``b[name]`` are per-item scores in the same item order. Each benchmark is one sample
    for ``scipy.stats.bootstrap`` (A's and B's score of an item drawn together, items drawn within their
    benchmark); ``chunk`` resamples are held in memory at a time.
    """
    from scipy.stats import bootstrap, gmean

    names = list(a)
    if not names:
        raise ValueError("no benchmarks to compare")
    samples = []
    for name in names:
        va, vb = np.asarray(a[name], dtype=float), np.asarray(b[name], dtype=float)
        if va.shape != vb.shape or va.size == 0:
            raise ValueError(f"{name}: A and B need the same, non-empty documents")
        samples.append(np.stack([va, vb]))
    sizes = np.array([sample.shape[1] for sample in samples], dtype=float)

    def differences(*samples, axis=-1):
        """B - A of every benchmark's mean, of the pooled mean and of the geometric mean (0 where a score
        is 0)."""
        means = np.stack([sample.mean(axis=axis) for sample in samples])  # benchmark, A/B, resample
        pooled = np.tensordot(sizes, means, axes=(0, 0)) / sizes.sum()  # A/B, resample
        with np.errstate(divide="ignore"):
            geo = gmean(means[:, 1], axis=0) - gmean(means[:, 0], axis=0)
        return np.concatenate([means[:, 1] - means[:, 0], (pooled[1] - pooled[0])[None], geo[None]])

    result = bootstrap(
        samples,
        differences,
        vectorized=True,
        axis=-1,
        n_resamples=resamples,
        batch=chunk,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    lows, highs = result.confidence_interval

    points_a = np.array([sample[0].mean() for sample in samples])
    points_b = np.array([sample[1].mean() for sample in samples])
    summary = _difference
    tasks = {
        name: summary(float(pa), float(pb), lows[i], highs[i], (samples[i][0], samples[i][1]))
        for i, (name, pa, pb) in enumerate(zip(names, points_a, points_b))
    }
    every_a, every_b = np.concatenate([s[0] for s in samples]), np.concatenate([s[1] for s in samples])
    pooled = summary(float(every_a.mean()), float(every_b.mean()), lows[-2], highs[-2], (every_a, every_b))
    with np.errstate(divide="ignore"):
        geo = summary(float(gmean(points_a)), float(gmean(points_b)), lows[-1], highs[-1])
    return {"tasks": tasks, "pooled": pooled, "geometric_mean": geo, "resamples": resamples, "seed": seed}


def compare_benchmarks(
    path_a: str | os.PathLike, path_b: str | os.PathLike, resamples: int = 2000, seed: int = 0, say=print
) -> dict:
    """Paired comparison of two ``spag benchmark`` outputs (B - A); see the module docstring."""
    metrics_a, samples_a = read_benchmark(path_a)
    metrics_b, samples_b = read_benchmark(path_b)
    if metrics_a.get("suite") != metrics_b.get("suite"):
        say(f"compare: the runs used different suites ({metrics_a.get('suite')} vs {metrics_b.get('suite')})")
    common = [name for name in samples_a if name in samples_b]
    for name in sorted(set(samples_a) ^ set(samples_b)):
        say(f"compare: {name} is in only one of the runs; left out")
    if not common:
        raise DataError(path_b, None, f"no benchmark in common with {path_a}")
    a, b = {}, {}
    for name in common:
        docs = sorted(set(samples_a[name]) & set(samples_b[name]))
        if not docs:
            raise DataError(path_b, None, f"{name}: no document in common with {path_a}")
        if len(docs) < 2:
            raise DataError(
                path_b,
                None,
                f"{name}: one document in common with {path_a}; an interval needs "
                "at least 2 (run the benchmarks with a larger --limit)",
            )
        dropped = len(samples_a[name]) + len(samples_b[name]) - 2 * len(docs)
        if dropped:
            say(f"compare: {name}: {dropped} documents answered in only one run; compared on {len(docs)}")
        a[name] = np.array([samples_a[name][d] for d in docs])
        b[name] = np.array([samples_b[name][d] for d in docs])
    result = paired_bootstrap(a, b, resamples=resamples, seed=seed)
    return {"a": str(path_a), "b": str(path_b), **result}


def format_table(result: Mapping) -> str:
    """A plain-text table: score of A, of B, B - A with its interval, McNemar's p, the minimum detectable
    effect and the items; a mark where the interval excludes 0."""
    rows = [
        *result["tasks"].items(),
        ("pooled", result["pooled"]),
        ("geometric mean", result["geometric_mean"]),
    ]
    width = max(len(name) for name, _ in rows)
    header = (
        f"{'benchmark':<{width}}  {'A':>7}  {'B':>7}  {'B-A':>7}  {'95% interval':>19}  {'p':>7}  "
        f"{'MDE':>6}  {'n':>6}"
    )
    lines = [header, "-" * len(header)]
    for name, r in rows:
        mark = " *" if r["excludes_zero"] else ""
        p = f"{r['p_mcnemar']:7.3f}" if "p_mcnemar" in r else " " * 7
        mde = f"{100 * r['mde']:6.2f}" if "mde" in r else " " * 6
        n = str(r.get("n", ""))
        lines.append(
            f"{name:<{width}}  {100 * r['a']:7.2f}  {100 * r['b']:7.2f}  {100 * r['diff']:+7.2f}  "
            f"[{100 * r['diff_low']:+7.2f}, {100 * r['diff_high']:+7.2f}]  {p}  {mde}  {n:>6}{mark}"
        )
    lines.append(
        f"(scores in %; * the 95% paired-bootstrap interval excludes 0 ({result['resamples']} resamples); "
        "p: exact McNemar test; MDE: minimum detectable effect at 80% power)"
    )
    return "\n".join(lines)
