"""Stage `baselines`: see spag.pipeline.stages.baselines.baselines.

The stage validates params.yaml and runs spag.pipeline.stages.baselines.baselines on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.baselines import baselines

if __name__ == "__main__":
    stage_script(baselines, Path(__file__).resolve().parent.parent)
