"""Stage `baselines`: see spag.pipeline.baselines.

The stage validates params.yaml and runs spag.pipeline.baselines on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.pipeline import baselines, run_stage

if __name__ == "__main__":
    run_stage(baselines, Path(__file__).resolve().parent.parent)
