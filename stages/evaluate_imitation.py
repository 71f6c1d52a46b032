"""Stage `evaluate_imitation`: the imitation model's benchmark scores, the baseline of every epoch's.

The stage validates params.yaml and runs spag.pipeline.stages.evaluate_imitation.evaluate_imitation on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.evaluate_imitation import evaluate_imitation

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(evaluate_imitation, Path(__file__).resolve().parent.parent)
