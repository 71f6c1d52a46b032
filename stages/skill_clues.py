"""Stage `skill_clues`: see spag.pipeline.skill_clues.

The stage validates params.yaml and runs spag.pipeline.skill_clues on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.pipeline import run_stage, skill_clues

if __name__ == "__main__":
    run_stage(skill_clues, Path(__file__).resolve().parent.parent)
