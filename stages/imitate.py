"""Stage `imitate`: imitation learning (SFT with a KL penalty to the base model) on the teacher's wins.

The stage validates params.yaml and runs spag.pipeline.stages.imitate.imitate on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.imitate import imitate

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(imitate, Path(__file__).resolve().parent.parent)
