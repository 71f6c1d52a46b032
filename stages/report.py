"""Stage `report`: per-epoch scores with intervals: metrics/report.json, the plot CSVs and learning_curves.png.

The stage validates params.yaml and runs spag.pipeline.stages.report.report on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.report import report

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(report, Path(__file__).resolve().parent.parent)
