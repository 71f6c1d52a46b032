"""Stage `words`: the target word list and its training / held-out split.

The stage validates params.yaml and runs spag.pipeline.words on the params it declares in dvc.yaml.
"""

from pathlib import Path

from spag.pipeline import run_stage, words

if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this file again
    run_stage(words, Path(__file__).resolve().parent.parent)
