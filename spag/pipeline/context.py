"""What a stage's work is handed: a view of its declared settings (:class:`Declared`), the pipeline's
:class:`Layout`, and the few helpers every stage shares (its game, its sample of targets, the model it
starts from; :mod:`spag.pipeline.games` has the stage's game).

This is the stage's side of the pipeline; :mod:`spag.pipeline.run` is the harness that validates the params,
runs the preflight and tunes the process before it calls the stage. A stage's module imports this one and
never the harness, so that ``dvc.yaml`` lists as a stage's dependencies the code its work runs
(:mod:`spag.pipeline.dvcyaml`), and an edit of the preflight or the process tuning re-runs no stage.

:data:`spag.pipeline.table.STAGES` declares each stage once: its params, data, outputs. A stage reads only the
params it declares: :func:`spag.pipeline.run.run_stage` hands each stage a :class:`Declared` view of the
validated settings that refuses any other key, so every knob a stage reads is a tracked param, and changing it
makes the stage stale. ``{epoch}`` in a key stands for the stage's epoch (``spag.epochs.{epoch}``: an epoch's
own entry, so that adding an epoch leaves the others up to date).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.config import existing_file
from spag.pipeline.table import STAGE_PARAMS, checkpoint
from spag.runtime.errors import UndeclaredParam

# A stage's declared outputs are its own: DVC deletes them before it runs the stage and restores them
# from its cache, so a stage replaces any regular file at those paths (never a folder, device or FIFO), and
# records nothing beside them (dvc.lock is their record).
OWN = "any"


class Declared:
    """Read-only view of settings that lets a stage read only the keys it declares (and what is below them)."""

    def __init__(self, value: Any, declared: frozenset[str], stage: str, prefix: str = ""):
        self._value, self._declared, self._stage, self._prefix = value, declared, stage, prefix

    def _get(self, key: str, value: Any) -> Any:
        path = self._prefix + key
        if any(path == d or path.startswith(d + ".") for d in self._declared):
            return value
        if any(d.startswith(path + ".") for d in self._declared):
            return Declared(value, self._declared, self._stage, path + ".")
        raise UndeclaredParam(f"stage {self._stage} reads {path}, which its dvc.yaml entry does not declare")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(type(self._value), name, None)
        if callable(method):  # a section's method reads its fields through this view, so they are checked too
            return functools.partial(method, self)
        return self._get(name, getattr(self._value, name))

    def __getitem__(self, key: str) -> Any:
        return self._get(str(key), self._value[key])


def section_key(view: Declared) -> str:
    """The dotted key of the section ``view`` shows (``"imitate"`` for ``settings.imitate``), for messages
    that name its settings."""
    return view._prefix.rstrip(".")


def declared_params(stage: str, epoch: str | None = None) -> tuple[str, ...]:
    return tuple(key.format(epoch=epoch) for key in STAGE_PARAMS[stage])


# ------------------------------------------------------------------------------------------ layout


@dataclass(frozen=True)
class Layout:
    """Where the pipeline keeps its files, below the project root."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics"

    @property
    def base_model(self) -> Path:
        return self.model("base")

    @property
    def words(self) -> Path:
        return self.data / "words"

    def model(self, name: str) -> Path:
        """A checkpoint by its pipeline name: "base" (the base model), "imitation", "epoch_1", ..."""
        return self.root / checkpoint(name)

    def epoch(self, epoch: str) -> Path:
        return self.data / f"epoch_{epoch}"

    def live(self, name: str) -> Path:
        return self.root / "dvclive" / name

    @property
    def benchmark_data(self) -> Path:
        return self.data / "benchmarks"


def setting_file(settings: Declared, key: str) -> str:
    """The existing file that params key ``section.key`` names (or ParamsError)."""
    section, name = key.split(".")
    return existing_file(getattr(getattr(settings, section), name), key)


def previous_model(settings: Declared, layout: Layout, epoch: str) -> Path:
    return layout.model(settings.spag.epochs[epoch].previous)
