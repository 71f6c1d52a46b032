"""Stage `train@N` (`python stages/train.py N`): SPAG offline policy optimisation from the previous model, or
online self-play from it (`spag.method: online`).

The stage validates params.yaml and runs spag.pipeline.stages.train.train on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.train import train

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(train, Path(__file__).resolve().parent.parent)
