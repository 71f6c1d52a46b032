"""Partial work beside a DVC output.

DVC deletes a stage's outputs before it runs the command, so a ``play@N`` killed after fifty minutes would
start again from nothing if it wrote into the output. :func:`resumable_output` gives the stage a work path
beside the output (``.NAME.partial``, which DVC does not track or delete), and renames it onto the output
only when the block finishes; the finished output equals an uninterrupted run's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from spag.harness.folders import output_kind, publish_dir
from spag.harness.rule import check_output_file
from spag.runtime.errors import OutputRefused
from spag.runtime.signals import graceful_termination

SUFFIX = ".partial"


def partial_path(output: str | os.PathLike) -> Path:
    """``dir/.NAME.partial`` for ``dir/NAME``; ``dir/.STEM.partial.parquet`` for a file output."""
    output = Path(output)
    return output.parent / f".{output.stem}{SUFFIX}{output.suffix}"


@contextlib.contextmanager
def resumable_output(output: str | os.PathLike, kind: str) -> Iterator[Path]:
    """Yield the work path for ``output`` (a directory or a file written by ``spag <kind>``); move it onto
    ``output`` when the block succeeds. SIGTERM unwinds the block (finished work is flushed) and leaves
    the work path in place. An existing ``output`` is replaced only if it is empty or ours of ``kind``
    (and then only what spag recorded in it: see :func:`spag.harness.folders.publish_dir`).
    """
    output = Path(output)
    work = partial_path(output)
    if work.exists():
        print(f"note: resuming from {work}", flush=True)
    with graceful_termination():
        yield work
    if not work.exists():
        return
    if output.is_dir() and any(output.iterdir()) and output_kind(output) != kind:
        raise OutputRefused(output, f"is in the way of {work} and was not written by `spag {kind}`")
    if work.is_dir():
        publish_dir(work, output, kind)
    else:
        os.replace(work, check_output_file(output, replace="any"))
