"""One training run as a stage runs it: the knobs of its section, its checkpoints beside the output, in the
stage's process or under the section's launcher."""

from __future__ import annotations

from pathlib import Path

from spag.config import TrainConfig, TrainKnobs, TrainStep
from spag.harness.launch import launch
from spag.harness.partial import partial_path
from spag.harness.training import train
from spag.models.devices import check_launch
from spag.pipeline.context import Layout, section_key


def train_config(
    step: TrainStep, epochs: float, output: Path, layout: Layout, name: str, seed: int
) -> TrainConfig:
    """The knobs of one pipeline training run."""
    # Each knob read by name, so that the stage's view of the settings checks it is declared.
    knobs = {key: getattr(step, key) for key in TrainKnobs.model_fields}

    # overwrite: a stage's output is replaced when it is a previous `spag train` output, never otherwise.
    # The checkpoints live beside the output (DVC deletes the output before it re-runs the stage), so a
    # killed stage continues from its latest checkpoint; those of another run (changed settings, model or
    # rows: why DVC re-runs it) are dropped.
    section = section_key(step)
    check_launch(step.launcher, step.deepspeed, f"{section}.launcher", f"{section}.deepspeed")
    return TrainConfig(
        **knobs,
        epochs=epochs,
        seed=seed,
        live_dir=layout.live(name),
        logging_steps=1,
        ref_cache_dir=layout.data / "cache" / "reference",
        overwrite=True,
        resume=True,
        checkpoint_dir=partial_path(output),
    )


def train_model(
    step: TrainStep,
    epochs: float,
    model: Path,
    data: Path,
    output: Path,
    layout: Layout,
    name: str,
    seed: int,
) -> None:
    """One training run in this process, or under ``step.launcher`` with its settings in a file."""
    config = train_config(step, epochs, output, layout, name, seed)
    if not step.launcher:
        train(step.method, model, data, output, config=config, other_checkpoints="restart")
        return

    launch(step.launcher, step.method, model, data, output, config, other_checkpoints="restart")
