"""The run's reasoning results: each checkpoint's benchmark items compared, paired, with the imitation
model's and the base model's.

Reads the benchmark outputs the stages wrote (``metrics/base``, ``metrics/imitation``,
``metrics/epochs/N``: ``benchmark.json`` and its per-item ``benchmark.samples.jsonl``) and compares them
with :func:`spag.evaluate.compare.compare_benchmarks`: per benchmark and pooled over all items, the
paired-bootstrap interval of the accuracy difference, the exact McNemar test and the minimum detectable
effect at 80% power. :mod:`spag.pipeline.report` puts these into ``report.json``, ``details.json`` (per epoch,
``reasoning.vs_imitation`` and ``reasoning.vs_base``: the pooled difference with its interval, p-value,
detectable effect and items) and the plot ``plots/reasoning.csv``.
"""

from __future__ import annotations

import json
from pathlib import Path

from spag.evaluate.compare import compare_benchmarks
from spag.runtime.errors import DataError

BASELINES = {"vs_imitation": "imitation", "vs_base": "base"}
RESAMPLES = 2000


def benchmark_file(metrics: Path, checkpoint: str) -> Path:
    """``base``, ``imitation`` or an epoch number -> its benchmark.json."""
    folder = metrics / "epochs" / checkpoint if checkpoint.isdigit() else metrics / checkpoint
    return folder / "benchmark.json"


def passed_over(**why) -> dict:
    """The benchmark.json of a checkpoint the settings pass over, with the setting that did: ``every=N`` for
    an epoch ``evaluate.benchmark.every`` skips, ``base=False`` for the base model."""
    return {"benchmark": "off", **why, "tasks": {}}


def why_not_run(bench: dict) -> str:
    """The setting that passed a checkpoint over, from :func:`passed_over`'s note."""
    if "every" in bench:
        return f"evaluate.benchmark.every: {bench['every']}"
    return "evaluate.benchmark.base: false"


def measured(bench: dict | None) -> bool:
    """Whether a benchmark.json's contents hold scores (not :func:`passed_over`'s note)."""
    return bool(bench) and bench.get("benchmark") != "off"


def _measured_file(path: Path) -> dict | None:
    """A checkpoint's benchmark.json, if it holds scores."""
    bench = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    return bench if measured(bench) else None


def _compare(metrics: Path, a: str, b: str) -> dict | None:
    path_a, path_b = benchmark_file(metrics, a), benchmark_file(metrics, b)
    if _measured_file(path_a) is None or _measured_file(path_b) is None:
        return None
    try:
        return compare_benchmarks(path_a, path_b, resamples=RESAMPLES, say=lambda _: None)
    except DataError as exc:
        return {"error": str(exc)}


def _scores(metrics: Path, checkpoint: str) -> dict | None:
    """Per benchmark: score, items, chance and whether the score is at chance."""
    bench = _measured_file(benchmark_file(metrics, checkpoint))
    if bench is None:
        return None
    return {
        name: {k: r[k] for k in ("label", "score", "n", "chance", "at_chance") if k in r}
        for name, r in bench["tasks"].items()
    } | ({"skipped": bench["skipped"]} if bench.get("skipped") else {})


def reasoning_report(metrics: Path, epochs: list[int]) -> dict:
    """Every checkpoint's scores, and each epoch (and the imitation model) compared with its baselines."""
    report: dict = {"checkpoints": {}, "imitation": {}, "epochs": {}}
    for checkpoint in ["base", "imitation", *map(str, epochs)]:
        scores = _scores(metrics, checkpoint)
        if scores is not None:
            report["checkpoints"][checkpoint] = scores
    vs_base = _compare(metrics, "base", "imitation")
    if vs_base is not None:
        report["imitation"]["vs_base"] = vs_base
    for epoch in map(str, epochs):
        entry = {
            key: cmp
            for key, baseline in BASELINES.items()
            if (cmp := _compare(metrics, baseline, epoch)) is not None
        }
        if entry:
            report["epochs"][epoch] = entry
    return report


def headline(comparisons: dict | None) -> dict:
    """``{"vs_imitation": {delta, low, high, p_mcnemar, mde, items}, "vs_base": {...}}``: the pooled
    accuracy difference (B - A, a fraction) of each comparison, flat enough for ``dvc metrics show``."""
    out = {}
    for key, cmp in (comparisons or {}).items():
        pooled = cmp.get("pooled")
        if pooled is None:
            continue
        out[key] = {
            "delta": pooled["diff"],
            "low": pooled["diff_low"],
            "high": pooled["diff_high"],
            "p_mcnemar": pooled.get("p_mcnemar"),
            "mde": pooled.get("mde"),
            "items": pooled["n"],
        }
    return out


def plot_rows(reasoning: dict) -> list[dict]:
    """Long-format rows (``epoch, series, value, low, high``) of the pooled difference per epoch against
    each baseline; epoch 0 is the imitation model against the base model."""
    rows = []
    start = reasoning.get("imitation", {}).get("vs_base", {}).get("pooled")
    if start is not None:
        rows.append(
            {
                "epoch": 0,
                "series": "vs base",
                "value": start["diff"],
                "low": start["diff_low"],
                "high": start["diff_high"],
            }
        )
    for epoch, entry in reasoning.get("epochs", {}).items():
        for key, cmp in entry.items():
            pooled = cmp.get("pooled")
            if pooled is not None:
                rows.append(
                    {
                        "epoch": int(epoch),
                        "series": key.replace("_", " "),
                        "value": pooled["diff"],
                        "low": pooled["diff_low"],
                        "high": pooled["diff_high"],
                    }
                )
    return rows
