"""How a DVC stage runs: ``stages/NAME.py`` calls :func:`stage_script` with the stage's function (one module
each, :mod:`spag.pipeline.stages`), which validates the params, runs the preflight and hands the stage a
view of its settings and the pipeline's :class:`~spag.pipeline.context.Layout`.

This is the harness: params, preflight, signals and process tuning. Nothing here changes what a stage
writes, and no stage's module imports it, so ``dvc.yaml`` does not list it among a stage's dependencies
(:mod:`spag.pipeline.dvcyaml`): an edit here re-runs no stage.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from spag.config import load_settings
from spag.harness.allocator import keep_freed_memory
from spag.harness.process import end_process
from spag.harness.rule import enforce
from spag.pipeline.context import Declared, Layout, declared_params
from spag.pipeline.dvcyaml import missing_dependencies
from spag.pipeline.preflight import check_stage
from spag.pipeline.table import EPOCH_STAGES
from spag.runtime.errors import DataError, ParamsError
from spag.runtime.signals import STOPS, command_signals, stopped


def stage_script(stage: Callable, root: str | Path) -> NoReturn:
    """A stage script's one call: :func:`run_stage` on the script's arguments, then the process ends
    (:func:`spag.harness.process.end_process`)."""
    end_process(functools.partial(run_stage, stage, root))


def run_stage(stage: Callable, root: str | Path, argv: list[str] | None = None) -> None:
    """Validate ``root/params.yaml`` (all of it) and run ``stage`` on the keys it declares.

    Bad params or input data end the process with one line on stderr and exit code 2; Ctrl-C and SIGTERM
    with one line and exit code 130 or 143 (:func:`spag.runtime.signals.stopped`), after the stage's
    finished work is written.
    """
    keep_freed_memory()  # a stage owns its process: freed memory is kept for reuse (CPU inference)
    enforce()  # the output rule watches every write (spag.harness.rule)
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
            missing = missing_dependencies(root, name, settings)
            if missing:
                raise ParamsError(
                    "dvc.yaml",
                    name,
                    f"does not depend on {', '.join(missing)}, which these params "
                    "run (a backend chosen after it was written): run `make dvc.yaml`",
                )
            view = Declared(settings, frozenset(declared_params(name, epoch)), name)
            stage(view, Layout(root), *([epoch] if epoch is not None else []))
    except (ParamsError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except STOPS as exc:  # one line and 130 or 143, as the `spag` command says it
        line, code = stopped(exc)
        print(f"error: {line}", file=sys.stderr)
        raise SystemExit(code) from None
