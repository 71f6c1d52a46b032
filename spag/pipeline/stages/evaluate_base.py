"""Stage ``evaluate_base``: the base model's benchmark scores (Kuhn poker: and its strategy).

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from spag.config import Settings
from spag.pipeline.benchmarking import benchmark_model, benchmark_passed_over, reasoning_line
from spag.pipeline.context import Layout
from spag.pipeline.evaluation import write_checkpoint_strategy
from spag.runtime.console import summary


def evaluate_base(settings: Settings, layout: Layout) -> None:
    """The base model's benchmark scores: what imitation and every SPAG epoch are also compared with
    (``evaluate.benchmark.base``); in Kuhn poker its strategy and exploitability, the first point of the
    report's curve."""
    folder = layout.metrics / "base"
    if settings.evaluate.benchmark.base:
        scores = benchmark_model(settings, layout, layout.base_model, folder)
    else:
        scores = benchmark_passed_over(folder, base=False)
    strategy = write_checkpoint_strategy(settings, layout.base_model, folder)
    summary("evaluate_base", reasoning_line(scores) + (f"; {strategy}" if strategy else ""))
