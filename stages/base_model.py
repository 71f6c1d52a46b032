"""Stage `base_model`: the model SPAG starts from, as a plain HF directory under data/base/model.

The stage validates params.yaml and runs spag.pipeline.stages.base_model.base_model on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.base_model import base_model

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(base_model, Path(__file__).resolve().parent.parent)
