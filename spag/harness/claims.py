"""A command's claim on its outputs, taken before any work: each file passes the output rule and is locked
for the command (:func:`claim_files`, :func:`hold`) until it ends (:func:`release_held`); a folder output is
absent, empty, or a previous output of the same command (:func:`claim_output_dir`); no output is an input or
another output (:func:`check_distinct_paths`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from spag.harness.folders import clear_output_dir, mark_output_dir, others, output_kind, writer
from spag.harness.locks import acquire, release
from spag.harness.rule import RULE, check_output_file, claim_file, claim_folder, odd_file, replace_mode
from spag.runtime.atomic import followed
from spag.runtime.errors import DataError, OutputRefused

_CLAIMED: list[Path | None] = []  # locks taken by claim_files and hold, released by release_held


def claim_files(
    outputs: Mapping[str, str | os.PathLike | None], *, overwrite: bool = False
) -> dict[str, Path]:
    """Claim a command's file outputs (option -> path; None skipped) before any work: each must pass the
    output rule (:func:`spag.harness.rule.check_output_file`, with ``--overwrite`` as given) and is locked
    for this command until :func:`release_held` (the CLI calls it when the command ends). Returns the paths
    to write, symlinks followed."""
    claimed = {}
    for option, path in outputs.items():
        if path is None:
            continue
        claimed[option] = claim_file(path, option, replace_mode(overwrite))
        _CLAIMED.append(acquire(path))
    return claimed


def hold(output: str | os.PathLike, part: str | None = None) -> None:
    """Lock ``output`` (or a ``part`` of it, see :func:`spag.harness.locks.writing`) until
    :func:`release_held`: for folder outputs a command claims before minutes of loading models."""
    _CLAIMED.append(acquire(output, part))


def release_held() -> None:
    """Release the locks :func:`claim_files` and :func:`hold` took, and forget the command's claims (the end
    of a command)."""
    while _CLAIMED:
        release(_CLAIMED.pop())
    RULE.forget()


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


def claim_output_dir(
    path: str | os.PathLike, kind: str, *, overwrite: bool = False, resume: bool = False
) -> Path:
    """Check that ``spag <kind>`` may write the directory ``path``; raise OutputRefused if not. Returns the
    directory to write (a symlink to a folder is followed).

    Allowed: a missing or empty directory; a previous output of the same kind with ``overwrite`` (its
    entries will be replaced) or ``resume`` (it will be continued). A file, a device node, a read-only
    folder, a folder of someone else's files, or the output of another command is never allowed.
    """
    given = Path(path)
    target = followed(given)
    if not target.exists():
        check_output_file(target, f"{writer(kind)} writes a folder here")
        claim_folder(target, kind)
        return target
    if not target.is_dir():
        odd = odd_file(target.stat().st_mode)
        raise OutputRefused(
            given,
            f"is {odd}, not a directory: spag never replaces it"
            if odd
            else f"exists and is not a directory; {writer(kind)} needs a directory here",
        )
    if not os.access(target, os.W_OK | os.X_OK) or not target.stat().st_mode & 0o222:
        raise OutputRefused(given, "is a read-only folder: refusing to write into it")
    if not others(target):
        claim_folder(target, kind)
        return target
    found = output_kind(target)
    if found is None:
        raise OutputRefused(
            given,
            f"is not empty and was not written by {writer(kind)}: refusing to "
            "replace it (choose a new or empty directory)",
        )
    if found != kind:
        raise OutputRefused(
            given,
            f"holds the output of {writer(found)}, not {writer(kind)}: refusing to "
            "replace it (choose a new or empty directory)",
        )
    if not (overwrite or resume):
        raise OutputRefused(
            given,
            f"holds a previous {writer(kind)} output: pass --overwrite to replace it"
            + (" or --resume to continue it" if kind in RESUMABLE else ""),
        )
    claim_folder(target, kind)
    return target


RESUMABLE = frozenset({"play", "train", "evaluate", "tournament"})


def prepare_output_dir(
    path: str | os.PathLike, kind: str, *, overwrite: bool = False, resume: bool = False
) -> Path:
    """Claim ``path`` for ``spag <kind>`` (see :func:`claim_output_dir`), remove what a previous output of
    the same kind left there if it is overwritten (not resumed), create and mark it. Returns the path."""
    target = claim_output_dir(path, kind, overwrite=overwrite, resume=resume)
    if overwrite and not resume and target.is_dir() and output_kind(target) == kind:
        clear_output_dir(target)
    mark_output_dir(target, kind)
    return target
