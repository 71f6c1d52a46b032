"""Stage `evaluate@N` (`python stages/evaluate.py N`): epoch N against the imitation model on held-out words; benchmarks.

The stage validates params.yaml and runs spag.pipeline.stages.evaluate.evaluate on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.harness.process import short_lived_process

short_lived_process()  # first, before the stage's imports and its work (spag.harness.process)

from spag.pipeline.run import stage_script
from spag.pipeline.stages.evaluate import evaluate

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    stage_script(evaluate, Path(__file__).resolve().parent.parent)
