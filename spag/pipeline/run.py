"""How a DVC stage runs: ``stages/NAME.py`` calls :func:`run_stage` with the stage's function (one module
each, :mod:`spag.pipeline.stages`), which validates the params, runs the preflight and hands the stage a
view of its settings and the pipeline's :class:`Layout`.

:data:`spag.pipeline.table.STAGES` declares each stage once: its params, data, outputs; ``dvc.yaml`` is
written from it (``python -m spag.pipeline.dvcyaml``), with the ``spag/`` modules each stage runs as
dependencies. A stage reads
only the params it declares: :func:`run_stage` hands each stage a view of the validated settings that
refuses any other key. So every knob a stage reads is a tracked param, and changing it makes the
stage stale. ``{epoch}`` in a key stands for the stage's epoch (``spag.epochs.{epoch}``: an epoch's own
entry, so that adding an epoch leaves the others up to date).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from spag.config import existing_file, load_settings
from spag.game.base import Game
from spag.game.registry import make_game
from spag.game.words import read_words, sample_targets
from spag.pipeline.preflight import check_stage
from spag.pipeline.table import EPOCH_STAGES, STAGE_PARAMS, checkpoint
from spag.players.allocator import keep_freed_memory
from spag.runtime.errors import DataError, ParamsError, UndeclaredParam
from spag.runtime.process import end_process
from spag.runtime.signals import STOPS, command_signals, stopped

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


def stage_script(stage: Callable, root: str | Path) -> NoReturn:
    """A stage script's one call: :func:`run_stage` on the script's arguments, then the process ends
    (:func:`spag.runtime.process.end_process`)."""
    end_process(functools.partial(run_stage, stage, root))


def run_stage(stage: Callable, root: str | Path, argv: list[str] | None = None) -> None:
    """Validate ``root/params.yaml`` (all of it) and run ``stage`` on the keys it declares.

    Bad params or input data end the process with one line on stderr and exit code 2; Ctrl-C and SIGTERM
    with one line and exit code 130 or 143 (:func:`spag.runtime.signals.stopped`), after the stage's
    finished work is written.
    """
    keep_freed_memory()  # a stage owns its process: freed memory is kept for reuse (CPU inference)
    name = stage.__name__
    argv = sys.argv[1:] if argv is None else argv
    epoch = None
    if name in EPOCH_STAGES:
        if len(argv) != 1 or not argv[0].isdigit():
            raise SystemExit(f"usage: python stages/{name}.py EPOCH")
        epoch = argv[0]
    elif argv:
        raise SystemExit(f"usage: python stages/{name}.py")
    root = Path(root)
    params_file = os.path.relpath(root / "params.yaml")  # "params.yaml" where DVC runs it
    try:
        # SIGTERM (DVC's, a scheduler's, `timeout`'s) and Ctrl-C unwind as in a command: finished work is written.
        with command_signals():
            settings = load_settings(params_file)
            if epoch is not None and epoch not in settings.spag.epochs:
                raise ParamsError(params_file, f"spag.epochs.{epoch}", "no such epoch")
            # Before any work: what this stage and those after it need, every problem listed (exit 2).
            check_stage(settings, root, name if epoch is None else f"{name}@{epoch}", params_file)
            view = Declared(settings, frozenset(declared_params(name, epoch)), name)
            stage(view, Layout(root), *([epoch] if epoch is not None else []))
    except (ParamsError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except STOPS as exc:  # one line and 130 or 143, as the `spag` command says it
        line, code = stopped(exc)
        print(f"error: {line}", file=sys.stderr)
        raise SystemExit(code) from None


def setting_file(settings: Declared, key: str) -> str:
    """The existing file that params key ``section.key`` names (or ParamsError)."""
    section, name = key.split(".")
    return existing_file(getattr(getattr(settings, section), name), key)


def stage_game(settings: Declared) -> Game:
    """The game of the ``game`` section; a setting the game refuses (a templates file that is not there) is
    a ParamsError naming its key."""
    try:
        return make_game(settings.game)
    except ValueError as exc:
        key, _, message = str(exc).partition(": ")
        raise ParamsError("params.yaml", f"game.{key}", message) from None


def sample_words(path: Path, n: int, seed: str, game: Game) -> list[str]:
    """A seeded sample of ``n`` of ``game``'s targets from a target list file (:func:`sample_targets`)."""
    return sample_targets(read_words(path), n, seed, repeat=game.few_targets)


def previous_model(settings: Declared, layout: Layout, epoch: str) -> Path:
    return layout.model(settings.spag.epochs[epoch].previous)
