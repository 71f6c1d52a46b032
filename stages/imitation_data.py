"""Stage `imitation_data`: the winners' moves in the teacher's decisive games, plus general SFT data when asked.

The stage validates params.yaml and runs spag.pipeline.stages.imitation_data.imitation_data on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.imitation_data import imitation_data

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(imitation_data, Path(__file__).resolve().parent.parent)
