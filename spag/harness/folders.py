"""Folders that are a command's output (a trained model, the base model, episode shards, checkpoints).

Every command that writes a directory marks it with its kind and records each entry it writes (claimed
first: :func:`spag.harness.claims.claim_output_dir`). ``--overwrite`` removes only the entries spag recorded
(:func:`clear_output_dir`): a user's notes or subfolders stay, and the new output moves in beside them
(:func:`publish_dir`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from spag import __version__
from spag.harness.manifest import (
    LOCK_SUFFIX,
    MANIFEST,
    read_manifest,
    record_written,
    recorded_files,
    update_manifest,
)
from spag.runtime.atomic import followed
from spag.runtime.errors import OutputRefused

MARKER = MANIFEST  # the manifest of a folder that is a command's output names the command ("kind")
PLAY_KIND = "play"  # the kind of a play run's folder of episode shards


def output_kind(path: str | os.PathLike) -> str | None:
    """The command that wrote the directory ``path`` (from its marker), or None when it has none."""
    kind = read_manifest(path).get("kind")
    return str(kind) if isinstance(kind, str) else None


def mark_output_dir(path: str | os.PathLike, kind: str) -> None:
    """Mark ``path`` (created if needed) as an output of ``spag <kind>``; a folder made inside another
    spag output is recorded there as one of its entries."""
    path = Path(path)
    made = not path.exists()
    path.mkdir(parents=True, exist_ok=True)

    def mark(data: dict) -> None:
        if "kind" not in data:  # a folder marked now starts its record (a folder marked before keeps its own)
            recorded_files(data)
        data.update(kind=kind, spag=__version__)

    update_manifest(path, mark)
    if made and output_kind(path.parent):
        record_written(path)


# The folders one command writes beside its main output, as messages name their writer.
_WRITERS = {
    "train-live": "`spag train` (its dvclive folder)",
    "train-checkpoints": "`spag train` (its checkpoints)",
}


def writer(kind: str) -> str:
    """The command that writes outputs of ``kind``, as a message names it: "`spag play`"."""
    return _WRITERS.get(kind, f"`spag {kind}`")


def others(folder: Path) -> list[Path]:
    """The entries of ``folder`` apart from spag's manifest and lock files."""
    return [p for p in folder.iterdir() if not p.name.startswith(MARKER) and not p.name.endswith(LOCK_SUFFIX)]


def clear_output_dir(path: str | os.PathLike, keep: Iterable[str] = ()) -> None:
    """Remove what spag recorded in the output folder ``path`` (but the entries named in ``keep``): its
    files and folders, a recorded folder that is itself a spag output emptied the same way. Everything
    else (a user's notes, their subfolders) stays. A folder marked before spag recorded its entries is
    refused: what spag wrote there is not known."""
    folder = Path(path)
    manifest = read_manifest(folder)
    if manifest.get("earlier"):
        raise OutputRefused(
            folder,
            "was written by an earlier spag, which kept no record of its files: "
            "--overwrite cannot tell yours from spag's here; delete the folder or "
            "choose another",
        )
    files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    removed = []
    for name in files:
        entry = folder / name
        if name in keep or not (entry.exists() or entry.is_symlink()):
            removed.append(name)
            continue
        if entry.is_dir() and not entry.is_symlink():
            if output_kind(entry):
                clear_output_dir(entry)
                if others(entry):
                    continue  # the user's files in it stay, and so does the folder
                shutil.rmtree(entry)
            else:
                shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(name)

    def forget(data: dict) -> None:
        known = recorded_files(data)
        for name in removed:
            if name not in keep:
                known.pop(name, None)

    if removed:
        update_manifest(folder, forget)


def remove_if_bare(path: str | os.PathLike) -> None:
    """Remove the output folder ``path`` when nothing but spag's own bookkeeping is left in it."""
    folder = Path(path)
    if folder.is_dir() and not others(folder):
        shutil.rmtree(folder)


def publish_dir(
    staging: str | os.PathLike, output: str | os.PathLike, kind: str, last: str | None = None
) -> Path:
    """Move the finished folder ``staging`` into place as ``output`` (claimed by the caller) and mark it as
    ``spag <kind>``'s, every entry recorded.

    ``output`` absent or holding nothing but spag's previous entries: one rename. Holding a user's files
    too: spag's previous entries are removed and the new ones move in beside the user's, ``last`` (the file
    that says the output is finished) last; a new entry whose name a user's file already has is refused
    (the finished output stays in ``staging``).
    """
    staging, output = Path(staging), followed(output)
    mark_output_dir(staging, kind)
    entries = others(staging)
    record_written(*entries)
    if output.exists():
        clear_output_dir(output)
        if others(output):
            return _move_in(staging, output, kind, entries, last)
        (output / MARKER).unlink(missing_ok=True)
        output.rmdir()
    os.replace(staging, output)
    return output


def _move_in(staging: Path, output: Path, kind: str, entries: list[Path], last: str | None) -> Path:
    clash = next(
        (e.name for e in entries if (output / e.name).exists() or (output / e.name).is_symlink()), None
    )
    if clash is not None:
        raise OutputRefused(
            output / clash,
            f"is not spag's, and the new output has an entry of that name: move it "
            f"away (the finished output is in {staging})",
        )
    for entry in sorted(entries, key=lambda e: e.name == last):
        os.replace(entry, output / entry.name)
    mark_output_dir(output, kind)
    record_written(*(output / e.name for e in entries))
    shutil.rmtree(staging)
    return output
