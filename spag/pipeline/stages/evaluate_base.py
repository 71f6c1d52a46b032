"""Stage ``evaluate_base``: the base model's benchmark scores.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from spag.config import Settings
from spag.pipeline.benchmarking import benchmark_model, benchmark_passed_over, reasoning_line
from spag.pipeline.run import Layout
from spag.runtime.console import summary


def evaluate_base(settings: Settings, layout: Layout) -> None:
    """The base model's benchmark scores: what imitation and every SPAG epoch are also compared with
    (``evaluate.benchmark.base``)."""
    folder = layout.metrics / "base"
    if settings.evaluate.benchmark.base:
        scores = benchmark_model(settings, layout, layout.base_model, folder)
    else:
        scores = benchmark_passed_over(folder, base=False)
    summary("evaluate_base", reasoning_line(scores))
