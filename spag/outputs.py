"""Output directories the tool owns: a marker file in each, checked before anything is replaced.

Nothing is ever deleted that the tool did not write. Every command that writes a directory (a trained
model, the base model, episode shards, checkpoints) puts :data:`MARKER` in it, naming the command. Before
writing, :func:`claim_output_dir` accepts a target that is absent or empty, or a previous output of the
same kind when the caller passed ``--overwrite`` (or ``--resume``, to continue it); anything else is
refused with a one-line :class:`OutputRefused` (exit code 2 from the CLI).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from spag.io import DataError, write_json_atomic

MARKER = ".spag-output.json"


class OutputRefused(DataError):
    """The output directory holds something this command may not replace."""

    def __init__(self, path: str | os.PathLike, message: str):
        super().__init__(path, None, message)


def output_kind(path: str | os.PathLike) -> str | None:
    """The command that wrote the directory ``path`` (from its marker), or None when it has none."""
    marker = Path(path) / MARKER
    try:
        return str(json.loads(marker.read_text(encoding="utf-8"))["kind"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def mark_output_dir(path: str | os.PathLike, kind: str) -> None:
    """Mark ``path`` (created if needed) as an output of ``spag <kind>``."""
    from spag import __version__

    write_json_atomic(Path(path) / MARKER, {"kind": kind, "spag": __version__})


# The folders one command writes beside its main output, as messages name their writer.
_WRITERS = {"train-live": "`spag train` (its dvclive folder)",
            "train-checkpoints": "`spag train` (its checkpoints)"}


def writer(kind: str) -> str:
    """The command that writes outputs of ``kind``, as a message names it: "`spag play`"."""
    return _WRITERS.get(kind, f"`spag {kind}`")


def claim_output_dir(path: str | os.PathLike, kind: str, *, overwrite: bool = False,
                     resume: bool = False) -> None:
    """Check that ``spag <kind>`` may write the directory ``path``; raise OutputRefused if not.

    Allowed: a missing or empty directory; a previous output of the same kind with ``overwrite`` (it will
    be replaced) or ``resume`` (it will be continued). A file, a folder of someone else's files, or the
    output of another command is never allowed.
    """
    target = Path(path)
    if not target.exists():
        return
    if not target.is_dir():
        raise OutputRefused(target, f"exists and is not a directory; {writer(kind)} needs a directory here")
    if not any(target.iterdir()):
        return
    found = output_kind(target)
    if found is None:
        raise OutputRefused(target, f"is not empty and was not written by {writer(kind)}: refusing to "
                                    "replace it (choose a new or empty directory)")
    if found != kind:
        raise OutputRefused(target, f"holds the output of {writer(found)}, not {writer(kind)}: refusing to "
                                    "replace it (choose a new or empty directory)")
    if not (overwrite or resume):
        raise OutputRefused(target, f"holds a previous {writer(kind)} output: pass --overwrite to replace it"
                            + (" or --resume to continue it" if kind in RESUMABLE else ""))


RESUMABLE = frozenset({"play", "train", "evaluate", "tournament"})


def prepare_output_dir(path: str | os.PathLike, kind: str, *, overwrite: bool = False,
                       resume: bool = False) -> Path:
    """Claim ``path`` for ``spag <kind>`` (see :func:`claim_output_dir`), empty it if it is a previous
    output being overwritten (not resumed), create and mark it. Returns the path."""
    import shutil

    target = Path(path)
    claim_output_dir(target, kind, overwrite=overwrite, resume=resume)
    if overwrite and not resume and target.is_dir() and output_kind(target) == kind:
        shutil.rmtree(target)
    target.mkdir(parents=True, exist_ok=True)
    mark_output_dir(target, kind)
    return target
