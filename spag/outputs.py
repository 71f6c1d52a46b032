"""Outputs the tool owns: folders marked as a command's output, and one writer at a time for each output.

Nothing is ever deleted that the tool did not write. Every command that writes a directory (a trained
model, the base model, episode shards, checkpoints) marks it in its manifest (:data:`MARKER`, see
:mod:`spag.io`) with the command's name, and records there each entry it writes. Before writing,
:func:`claim_output_dir` accepts a target that is absent or empty, or a previous output of the same kind
when the caller passed ``--overwrite`` (or ``--resume``, to continue it); anything else is refused with a
one-line :class:`OutputRefused` (exit code 2 from the CLI). ``--overwrite`` then removes only the entries
spag recorded (:func:`clear_output_dir`): a user's notes or subfolders in the folder stay, and the new
output moves in beside them (:func:`publish_dir`).

Single files follow the same rule in :func:`spag.io.check_output_file`; a command claims its file outputs
before any work with :func:`claim_files`.

One writer per output: a claim takes a lock file beside the output (``.NAME.spag-lock``, holding who
writes: pid, user, host, command, start), so a second writer, started by mistake or by a colleague,
stops at once with one line naming the first. The lock is the kernel's (``flock``): a killed writer
leaves no lock behind, at most the small file, which the next writer reuses.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from spag import __version__
from spag.io import (
    MANIFEST,
    OutputRefused,
    check_output_file,
    followed,
    odd_file,
    read_manifest,
    record_written,
    recorded_files,
    replace_mode,
    update_manifest,
)

MARKER = MANIFEST  # the manifest of a folder that is a command's output names the command ("kind")
LOCK_SUFFIX = ".spag-lock"

__all__ = ["MARKER", "OutputRefused", "claim_files", "claim_output_dir", "clear_output_dir", "mark_output_dir",
           "output_kind", "prepare_output_dir", "publish_dir", "release_held", "remove_output_dir", "writing"]


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
_WRITERS = {"train-live": "`spag train` (its dvclive folder)",
            "train-checkpoints": "`spag train` (its checkpoints)"}


def writer(kind: str) -> str:
    """The command that writes outputs of ``kind``, as a message names it: "`spag play`"."""
    return _WRITERS.get(kind, f"`spag {kind}`")


def _others(folder: Path) -> list[Path]:
    """The entries of ``folder`` apart from spag's manifest and lock files."""
    return [p for p in folder.iterdir() if not p.name.startswith(MARKER) and not p.name.endswith(LOCK_SUFFIX)]


def claim_output_dir(path: str | os.PathLike, kind: str, *, overwrite: bool = False,
                     resume: bool = False) -> Path:
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
        return target
    if not target.is_dir():
        odd = odd_file(target.stat().st_mode)
        raise OutputRefused(given, f"is {odd}, not a directory: spag never replaces it" if odd else
                            f"exists and is not a directory; {writer(kind)} needs a directory here")
    if not os.access(target, os.W_OK | os.X_OK) or not target.stat().st_mode & 0o222:
        raise OutputRefused(given, "is a read-only folder: refusing to write into it")
    if not _others(target):
        return target
    found = output_kind(target)
    if found is None:
        raise OutputRefused(given, f"is not empty and was not written by {writer(kind)}: refusing to "
                                   "replace it (choose a new or empty directory)")
    if found != kind:
        raise OutputRefused(given, f"holds the output of {writer(found)}, not {writer(kind)}: refusing to "
                                   "replace it (choose a new or empty directory)")
    if not (overwrite or resume):
        raise OutputRefused(given, f"holds a previous {writer(kind)} output: pass --overwrite to replace it"
                            + (" or --resume to continue it" if kind in RESUMABLE else ""))
    return target


RESUMABLE = frozenset({"play", "train", "evaluate", "tournament"})


def clear_output_dir(path: str | os.PathLike, keep: Iterable[str] = ()) -> None:
    """Remove what spag recorded in the output folder ``path`` (but the entries named in ``keep``): its
    files and folders, a recorded folder that is itself a spag output emptied the same way. Everything
    else (a user's notes, their subfolders) stays. A folder marked before spag recorded its entries is
    refused: what spag wrote there is not known."""
    folder = Path(path)
    manifest = read_manifest(folder)
    if manifest.get("earlier"):
        raise OutputRefused(folder, "was written by an earlier spag, which kept no record of its files: "
                                    "--overwrite cannot tell yours from spag's here; delete the folder or "
                                    "choose another")
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
                if _others(entry):
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


def remove_output_dir(path: str | os.PathLike) -> None:
    """Remove what spag wrote in the folder ``path`` (:func:`clear_output_dir`), and the folder itself when
    nothing else is left in it."""
    folder = Path(path)
    clear_output_dir(folder)
    if not _others(folder):
        shutil.rmtree(folder)


def prepare_output_dir(path: str | os.PathLike, kind: str, *, overwrite: bool = False,
                       resume: bool = False) -> Path:
    """Claim ``path`` for ``spag <kind>`` (see :func:`claim_output_dir`), remove what a previous output of
    the same kind left there if it is overwritten (not resumed), create and mark it. Returns the path."""
    target = claim_output_dir(path, kind, overwrite=overwrite, resume=resume)
    if overwrite and not resume and target.is_dir() and output_kind(target) == kind:
        clear_output_dir(target)
    mark_output_dir(target, kind)
    return target


def publish_dir(staging: str | os.PathLike, output: str | os.PathLike, kind: str, last: str | None = None) -> Path:
    """Move the finished folder ``staging`` into place as ``output`` (claimed by the caller) and mark it as
    ``spag <kind>``'s, every entry recorded.

    ``output`` absent or holding nothing but spag's previous entries: one rename. Holding a user's files
    too: spag's previous entries are removed and the new ones move in beside the user's, ``last`` (the file
    that says the output is finished) last; a new entry whose name a user's file already has is refused
    (the finished output stays in ``staging``).
    """
    staging, output = Path(staging), followed(output)
    mark_output_dir(staging, kind)
    entries = _others(staging)
    record_written(*entries)
    if output.exists():
        clear_output_dir(output)
        if _others(output):
            return _move_in(staging, output, kind, entries, last)
        (output / MARKER).unlink(missing_ok=True)
        output.rmdir()
    os.replace(staging, output)
    return output


def _move_in(staging: Path, output: Path, kind: str, entries: list[Path], last: str | None) -> Path:
    clash = next((e.name for e in entries if (output / e.name).exists() or (output / e.name).is_symlink()), None)
    if clash is not None:
        raise OutputRefused(output / clash, f"is not spag's, and the new output has an entry of that name: move it "
                                            f"away (the finished output is in {staging})")
    for entry in sorted(entries, key=lambda e: e.name == last):
        os.replace(entry, output / entry.name)
    mark_output_dir(output, kind)
    record_written(*(output / e.name for e in entries))
    shutil.rmtree(staging)
    return output


# ---------------------------------------------------------------------------------- one writer each


class _Lock:
    def __init__(self, path: Path, fd: int, made: list[Path]):
        self.path, self.fd, self.made, self.count = path, fd, made, 1


_HELD: dict[Path, _Lock] = {}  # this process's locks by lock file: a writer that claims twice holds one
_SESSION: list[Path | None] = []  # locks taken by claim_files and hold, released by release_held


def lock_path(output: str | os.PathLike, part: str | None = None) -> Path:
    """The lock file of ``output``: ``.NAME.spag-lock`` beside it (a symlink's target's); a ``part`` of it
    written by one of several processes (a rank's shards): ``.NAME.PART.spag-lock``."""
    target = Path(os.path.realpath(output))
    return target.parent / f".{target.name}{'.' + part if part else ''}{LOCK_SUFFIX}"


def _holder() -> dict:
    command = " ".join(["spag", *sys.argv[1:]]) if Path(sys.argv[0]).name in ("spag", "cli.py") else \
        " ".join(sys.argv)
    return {"pid": os.getpid(), "user": getpass.getuser(), "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command[:120]}


def _acquire(output: Path, part: str | None = None) -> Path | None:
    """Take the lock of ``output`` (or count one more use of it, when this process holds it). None when no
    lock file can be made there (the output's own claim then refuses the path)."""
    path = lock_path(output, part)
    if path in _HELD:
        _HELD[path].count += 1
        return path
    made = [p for p in reversed(path.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # a file where a folder should be: the output's claim refuses it in a line
        _remove_made(made)
        return None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:  # a folder we may not write into: the claim says so
            _remove_made(made)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            _remove_made(made)
            raise OutputRefused(output, f"is being written by another spag process ({holder}): wait for it to "
                                        "end, or choose another output") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a lock file its last holder removed while this one waited
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps(_holder()) + "\n").encode())
    _HELD[path] = _Lock(path, fd, made)
    return path


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return (f"pid {info['pid']} of {info['user']} on {info['host']}, since {info['since']}: "
                f"{info['command']}")
    except (ValueError, KeyError, TypeError, OSError):
        return "a process that did not say who it is"


def _release(path: Path | None) -> None:
    lock = _HELD.get(path) if path is not None else None
    if lock is None:
        return
    lock.count -= 1
    if lock.count:
        return
    del _HELD[path]
    with contextlib.suppress(OSError):
        path.unlink()  # while still locked: a writer waiting on it sees it go and makes a new one
    os.close(lock.fd)
    _remove_made(lock.made)


def _remove_made(made: list[Path]) -> None:
    """Remove the folders a lock had to make, if nothing was written into them (a refused command leaves
    nothing behind)."""
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def writing(output: str | os.PathLike, part: str | None = None) -> Iterator[None]:
    """Hold the lock of ``output`` (or of the ``part`` of it this process writes) for the block: a second
    writer, in another process, is refused."""
    path = _acquire(Path(output), part)
    try:
        yield
    finally:
        _release(path)


def claim_files(outputs: Mapping[str, str | os.PathLike | None], *, overwrite: bool = False) -> dict[str, Path]:
    """Claim a command's file outputs (option -> path; None skipped) before any work: each must pass the
    output rule (:func:`spag.io.check_output_file`, with ``--overwrite`` as given) and is locked for this
    command until :func:`release_held` (the CLI calls it when the command ends). Returns the paths to
    write, symlinks followed."""
    claimed = {}
    for option, path in outputs.items():
        if path is None:
            continue
        claimed[option] = check_output_file(path, option, replace_mode(overwrite))
        _SESSION.append(_acquire(Path(path)))
    return claimed


def hold(output: str | os.PathLike, part: str | None = None) -> None:
    """Lock ``output`` (or a ``part`` of it, see :func:`writing`) until :func:`release_held`: for folder
    outputs a command claims before minutes of loading models."""
    _SESSION.append(_acquire(Path(output), part))


def release_held() -> None:
    """Release the locks :func:`claim_files` and :func:`hold` took (the end of a command)."""
    while _SESSION:
        _release(_SESSION.pop())
