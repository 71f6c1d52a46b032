"""Stage `evaluate_base`: the base model's benchmark scores, a baseline of the imitation model's and every epoch's.

The stage validates params.yaml and runs spag.pipeline.stages.evaluate_base.evaluate_base on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.evaluate_base import evaluate_base

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(evaluate_base, Path(__file__).resolve().parent.parent)
