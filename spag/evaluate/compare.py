"""Is B better than A? A paired bootstrap over the per-sample results of two benchmark runs.

Both checkpoints answered the same documents, so the comparison is paired: each bootstrap resample
draws documents with replacement, the same documents for A and for B, and recomputes each benchmark's
accuracy and the geometric mean over benchmarks. The 95% interval of B - A is the 2.5th to 97.5th
percentile of the resampled differences; a difference whose interval excludes 0 is unlikely to be
noise from the choice of documents. (It says nothing about noise from training itself: a second
training run with another seed can still move the score.)

A group benchmark such as MMLU is resampled over all its documents together, so its resampled score is
the size-weighted mean that lm-eval reports. Only documents present in both runs are compared.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from spag.io import DataError


def read_benchmark(path: str | os.PathLike) -> tuple[dict, dict[str, dict[tuple[str, int], float]]]:
    """(metrics, {benchmark: {(task, doc_id): correct}}) of a ``spag benchmark`` output."""
    from spag.io import read_records, read_text

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
    per_benchmark: dict[str, dict[tuple[str, int], float]] = {}
    for i, record in enumerate(read_records(samples_file)):
        try:
            key = (str(record["task"]), int(record["doc_id"]))
            correct = float(record["correct"])
            benchmark = str(record.get("benchmark", record["task"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(samples_file, i, f"needs task, doc_id and a numeric correct ({exc})")
        if not math.isfinite(correct):
            raise DataError(samples_file, i, f"correct is {correct}: a score must be a finite number")
        per_benchmark.setdefault(benchmark, {})[key] = correct
    return metrics, per_benchmark


def _samples_file(path: Path, metrics: dict) -> Path:
    """The per-sample results a benchmark result names (``samples_file``), or the default beside it."""
    from spag.evaluate.benchmark import samples_path

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


def paired_bootstrap(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], resamples: int = 2000,
                     seed: int = 0, chunk: int = 100) -> dict:
    """B - A per benchmark and for the geometric mean, with 95% percentile intervals.

    ``a[name]`` and ``b[name]`` are per-document scores in the same document order. Each benchmark is one
    sample of documents for ``scipy.stats.bootstrap`` (A's and B's score of a document drawn together);
    ``chunk`` resamples are held in memory at a time.
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

    def differences(*samples, axis=-1):
        """B - A of every benchmark's mean, then of their geometric mean (0 where a score is 0)."""
        means = np.stack([sample.mean(axis=axis) for sample in samples])  # benchmark, A/B, resample
        with np.errstate(divide="ignore"):
            geo = gmean(means[:, 1], axis=0) - gmean(means[:, 0], axis=0)
        return np.concatenate([means[:, 1] - means[:, 0], geo[None]])

    result = bootstrap(samples, differences, vectorized=True, axis=-1, n_resamples=resamples, batch=chunk,
                       method="percentile", random_state=np.random.default_rng(seed))
    lows, highs = result.confidence_interval

    def summary(point_a: float, point_b: float, low: float, high: float, n: int | None) -> dict:
        out = {"a": point_a, "b": point_b, "diff": point_b - point_a, "diff_low": float(low),
               "diff_high": float(high), "excludes_zero": bool(low > 0 or high < 0)}
        if n is not None:
            out["n"] = n
        return out

    points_a = np.array([sample[0].mean() for sample in samples])
    points_b = np.array([sample[1].mean() for sample in samples])
    tasks = {name: summary(float(pa), float(pb), lows[i], highs[i], samples[i].shape[1])
             for i, (name, pa, pb) in enumerate(zip(names, points_a, points_b))}
    with np.errstate(divide="ignore"):
        geo = summary(float(gmean(points_a)), float(gmean(points_b)), lows[-1], highs[-1], None)
    return {"tasks": tasks, "geometric_mean": geo, "resamples": resamples, "seed": seed}


def compare_benchmarks(path_a: str | os.PathLike, path_b: str | os.PathLike, resamples: int = 2000,
                       seed: int = 0, say=print) -> dict:
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
            raise DataError(path_b, None, f"{name}: one document in common with {path_a}; an interval needs "
                                          "at least 2 (run the benchmarks with a larger --limit)")
        dropped = len(samples_a[name]) + len(samples_b[name]) - 2 * len(docs)
        if dropped:
            say(f"compare: {name}: {dropped} documents answered in only one run; compared on {len(docs)}")
        a[name] = np.array([samples_a[name][d] for d in docs])
        b[name] = np.array([samples_b[name][d] for d in docs])
    result = paired_bootstrap(a, b, resamples=resamples, seed=seed)
    return {"a": str(path_a), "b": str(path_b), **result}


def format_table(result: Mapping) -> str:
    """A plain-text table: score of A, of B, B - A with its interval, and a mark where it excludes 0."""
    rows = [(name, r) for name, r in result["tasks"].items()] + [("geometric mean", result["geometric_mean"])]
    width = max(len(name) for name, _ in rows)
    header = f"{'benchmark':<{width}}  {'A':>7}  {'B':>7}  {'B-A':>7}  {'95% interval':>19}  {'n':>6}"
    lines = [header, "-" * len(header)]
    for name, r in rows:
        mark = " *" if r["excludes_zero"] else ""
        n = str(r.get("n", ""))
        lines.append(f"{name:<{width}}  {100 * r['a']:7.2f}  {100 * r['b']:7.2f}  {100 * r['diff']:+7.2f}  "
                     f"[{100 * r['diff_low']:+7.2f}, {100 * r['diff_high']:+7.2f}]  {n:>6}{mark}")
    lines.append(f"(scores in %; * the 95% paired-bootstrap interval excludes 0; "
                 f"{result['resamples']} resamples)")
    return "\n".join(lines)
