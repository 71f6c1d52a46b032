"""Stage `play@N` (`python stages/play.py N`): the previous checkpoint plays itself on this epoch's training words.

The stage validates params.yaml and runs spag.pipeline.stages.play.play on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.play import play

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(play, Path(__file__).resolve().parent.parent)
