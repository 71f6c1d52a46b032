"""Stage `skill_clues`: see spag.pipeline.stages.skill_clues.skill_clues.

The stage validates params.yaml and runs spag.pipeline.stages.skill_clues.skill_clues on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.skill_clues import skill_clues

if __name__ == "__main__":
    stage_script(skill_clues, Path(__file__).resolve().parent.parent)
