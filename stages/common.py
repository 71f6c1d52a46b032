"""What every stage shares: params.yaml and the layout of data/ and metrics/."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
METRICS = ROOT / "metrics"
BASE_MODEL = DATA / "base_model"
WORDS = DATA / "words"


def params() -> dict:
    with open(ROOT / "params.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def model_dir(name: str) -> Path:
    """A checkpoint by its pipeline name: "imitation", "epoch_1", ..."""
    return DATA / name / "model"


def epoch_dir(epoch: int | str) -> Path:
    return DATA / f"epoch_{epoch}"


def epoch_arg() -> str:
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: python {sys.argv[0]} EPOCH")
    return sys.argv[1]


def previous_model(p: dict, epoch: str) -> Path:
    epochs = {str(k): v for k, v in p["spag"]["epochs"].items()}
    return model_dir(epochs[epoch]["previous"])
