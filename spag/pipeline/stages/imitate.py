"""Stage ``imitate``: imitation learning: SFT with a KL penalty to the base model.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from spag.config import Settings
from spag.pipeline.context import Layout
from spag.pipeline.training import train_model


def imitate(settings: Settings, layout: Layout) -> None:
    """Imitation learning (SFT with a KL penalty to the base model) on the teacher's wins."""
    step = settings.imitate
    train_model(
        step,
        step.epochs,
        layout.base_model,
        layout.data / "imitation" / "rows.parquet",
        layout.model("imitation"),
        layout,
        "imitate",
        settings.seed,
    )
