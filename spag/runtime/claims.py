"""A command's claim on its outputs, taken before any work: each file passes the output rule and is locked
for the command (:func:`claim_files`, :func:`hold`) until it ends (:func:`release_held`); no output is an
input or another output (:func:`check_distinct_paths`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from spag.runtime.atomic import check_output_file, replace_mode
from spag.runtime.errors import DataError
from spag.runtime.locks import acquire, release

_CLAIMED: list[Path | None] = []  # locks taken by claim_files and hold, released by release_held


def claim_files(
    outputs: Mapping[str, str | os.PathLike | None], *, overwrite: bool = False
) -> dict[str, Path]:
    """Claim a command's file outputs (option -> path; None skipped) before any work: each must pass the
    output rule (:func:`spag.runtime.atomic.check_output_file`, with ``--overwrite`` as given) and is locked
    for this command until :func:`release_held` (the CLI calls it when the command ends). Returns the paths
    to write, symlinks followed."""
    claimed = {}
    for option, path in outputs.items():
        if path is None:
            continue
        claimed[option] = check_output_file(path, option, replace_mode(overwrite))
        _CLAIMED.append(acquire(path))
    return claimed


def hold(output: str | os.PathLike, part: str | None = None) -> None:
    """Lock ``output`` (or a ``part`` of it, see :func:`spag.runtime.locks.writing`) until
    :func:`release_held`: for folder outputs a command claims before minutes of loading models."""
    _CLAIMED.append(acquire(output, part))


def release_held() -> None:
    """Release the locks :func:`claim_files` and :func:`hold` took (the end of a command)."""
    while _CLAIMED:
        release(_CLAIMED.pop())


def check_distinct_paths(inputs: Mapping[str, object], outputs: Mapping[str, object]) -> None:
    """DataError when an output is the same file as an input or as another output (an input would be
    overwritten, or one output's content lost), or lies inside an input folder (a folder of shards would
    lose a shard, or read the output as one next time). Keys name the options (``-o``, ``--eval-out``,
    ...); None values are skipped."""

    def same(a: Path, b: Path) -> bool:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()

    seen: list[tuple[str, Path]] = [(name, Path(p)) for name, p in inputs.items() if p is not None]
    first_output = len(seen)
    for name, value in outputs.items():
        if value is None:
            continue
        path = Path(value)
        for index, (other, known) in enumerate(seen):
            if same(path, known):
                what = "the input" if index < first_output else "another output"
                raise DataError(
                    path, None, f"{name} is the same file as {other} ({what}); choose another path"
                )
            if (
                index < first_output
                and known.is_dir()
                and any(same(parent, known) for parent in path.absolute().parents)
            ):
                raise DataError(
                    path, None, f"{name} is inside the folder {other} (the input); choose a path outside it"
                )
        seen.append((name, path))
