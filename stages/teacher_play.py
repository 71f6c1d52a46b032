"""Stage `teacher_play`: the teacher plays itself (or its episodes or rows are imported); its wins become the imitation data.

The stage validates params.yaml and runs spag.pipeline.stages.teacher_play.teacher_play on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.teacher_play import teacher_play

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(teacher_play, Path(__file__).resolve().parent.parent)
