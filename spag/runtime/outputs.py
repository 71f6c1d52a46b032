"""The output rule, in one place: how spag writes files and folders, what it may replace, and who writes.

Files. A killed step must never leave a file that looks finished: every write goes to a temporary file
beside the target and is renamed into place (:func:`atomic_path`, and ``write_*_atomic`` on top of it).
A path that exists is replaced only if it is a regular file spag wrote, and only when the caller asks
(``--overwrite``); anything else is refused with one line (:class:`~spag.runtime.errors.OutputRefused`). A
device node, FIFO or socket is never replaced, nor is a read-only file; a symlink is followed (the file it
names is written, the link kept), a dangling one refused (:func:`check_output_file`).

Manifests. What spag wrote is recorded in the folder it wrote to, in :data:`MANIFEST` (``files``: each name
with its inode, size and modification time, so a file changed or replaced since is no longer spag's). The
same file marks a folder that is itself the output of a command (its ``kind``).

Folders. Every command that writes a directory (a trained model, the base model, episode shards,
checkpoints) marks it with its kind and records each entry it writes. :func:`claim_output_dir` accepts a
target that is absent or empty, or a previous output of the same kind when the caller passed
``--overwrite`` (or ``--resume``, to continue it). ``--overwrite`` then removes only the entries spag
recorded (:func:`clear_output_dir`): a user's notes or subfolders stay, and the new output moves in beside
them (:func:`publish_dir`). A command claims its file outputs before any work with :func:`claim_files`.

Locks. One writer per output: a claim takes a lock file beside the output (``.NAME.spag-lock``, holding
who writes: pid, user, host, command, start), so a second writer stops at once with one line naming the
first (:func:`writing`, :func:`hold`). The lock is the kernel's (``flock``): a killed writer leaves no
lock behind, at most the small file, which the next writer reuses.

Partial work. DVC deletes a stage's outputs before it runs the command, so a ``play@N`` killed after
fifty minutes would start again from nothing if it wrote into the output. :func:`resumable_output` gives
the stage a work path beside the output (``.NAME.partial``, which DVC does not track or delete), and
renames it onto the output only when the block finishes; the finished output equals an uninterrupted
run's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from spag import __version__
from spag.runtime.errors import DataError, OutputExists, OutputRefused
from spag.runtime.signals import graceful_termination

# ------------------------------------------------------------------------------- what spag wrote

MANIFEST = ".spag-output.json"

# What an existing target may be replaced by a write: "no" (a new file only: the default), "ours" (a file
# spag wrote, by its record in the manifest: what --overwrite allows) or "any" (a regular file at a path
# spag owns outright: its own working files, a DVC stage's declared output, which DVC deletes and restores).
Replace = Literal["no", "ours", "any"]


def replace_mode(overwrite: bool) -> Replace:
    """The :data:`Replace` mode of a command's ``--overwrite``."""
    return "ours" if overwrite else "no"


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns]


@contextlib.contextmanager
def _manifest_locked(folder: Path) -> Iterator[Path]:
    """The manifest of ``folder`` under its lock (several writers may share a folder: the ranks of one play
    run, two commands writing beside each other). The lock is the manifest file's own; a new manifest is
    renamed into place, so a writer that waited on the one it replaced opens the new one and waits again."""
    path = folder / MANIFEST
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield path
    finally:
        os.close(fd)


def _parse_manifest(text: str) -> dict:
    try:
        data = json.loads(text or "{}")
    except ValueError:  # not spag's, or damaged: nothing in it is trusted (refusing is the safe side)
        return {}
    return data if isinstance(data, dict) else {}


def read_manifest(folder: str | os.PathLike) -> dict:
    """What the manifest of ``folder`` says (``{}`` when it has none)."""
    try:
        return _parse_manifest((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeError):
        return {}


def update_manifest(folder: str | os.PathLike, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to the manifest of ``folder`` (created if needed) under its lock. The new manifest
    is written beside it and renamed into place: a process killed meanwhile leaves the old one whole."""
    with _manifest_locked(Path(folder)) as path:
        data = _parse_manifest(path.read_text(encoding="utf-8"))
        change(data)
        fd, tmp = tempfile.mkstemp(prefix=f"{MANIFEST}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        os.chmod(tmp, usual_mode())
        os.replace(tmp, path)


def usual_mode() -> int:
    """The mode a new file gets here (0o666 less the umask): mkstemp makes its files 0600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def recorded_files(data: dict) -> dict:
    """The ``files`` of a manifest's ``data``, made if missing. A folder spag marked as an output before it
    kept this record is flagged ``earlier``: what it wrote there then is not known."""
    if not isinstance(data.get("files"), dict):
        if "kind" in data:
            data["earlier"] = True
        data["files"] = {}
    return data["files"]


def record_written(*paths: str | os.PathLike) -> None:
    """Record the files or folders ``paths`` (all in one folder) in its manifest as written by spag."""
    paths = [Path(p) for p in paths]
    if not paths:
        return
    stamps = {}
    for path in paths:
        st = path.stat()
        stamps[path.name] = _stamp(st) if stat.S_ISREG(st.st_mode) else None
    update_manifest(paths[0].parent, lambda data: recorded_files(data).update(stamps))


def written_by_spag(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file spag wrote, unchanged since (or a folder entry spag recorded)."""
    path = Path(path)
    files = read_manifest(path.parent).get("files")
    if not isinstance(files, dict) or path.name not in files:
        return False
    recorded = files[path.name]
    try:
        st = path.stat()
    except OSError:
        return False
    return recorded is None if not stat.S_ISREG(st.st_mode) else recorded == _stamp(st)


# ---------------------------------------------------------------------------------- the output rule

_ODD_FILES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def odd_file(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is ("a FIFO", ...), or None."""
    return next((name for test, name in _ODD_FILES if test(mode)), None)


def read_only(path: Path, st: os.stat_result) -> bool:
    """No write permission for us, or none for anyone (root may write anywhere, but a file whose owner
    took every write bit away says "keep this")."""
    return not (st.st_mode & 0o222) or not os.access(path, os.W_OK)


def followed(path: str | os.PathLike, option: str = "the output") -> Path:
    """The path a write lands on: a symlink is followed to the file it names (the link stays as it is); a
    dangling one is refused, so no file is created wherever a link happens to point."""
    path = Path(path)
    if not path.is_symlink():
        return path
    real = Path(os.path.realpath(path))
    if not real.exists():
        raise OutputRefused(
            path,
            f"is a symlink to {real}, which does not exist: refusing to create a file through it ({option})",
        )
    return real


def check_output_file(path: str | os.PathLike, option: str = "the output", replace: Replace = "no") -> Path:
    """Apply the output rule to a file to be written at ``path``; return the path to write (a symlink
    followed). OutputRefused (one line, naming ``option``) when it may not be written:

    - a folder, a device node, a FIFO or a socket is there;
    - a read-only file is there, or the folder it would go into cannot be written;
    - a file is there and ``replace`` is "no", or "ours" and spag did not write it (or it changed since);
    - a parent of it is a file.

    Commands call it for each output before any work, and every write calls it again.
    """
    given = Path(path)
    target = followed(given, option)
    try:
        st = target.stat()
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as exc:
        raise OutputRefused(given, f"cannot be checked ({exc.strerror or exc}) ({option})") from None
    if st is None:
        _check_new_file(target, option)
    elif stat.S_ISDIR(st.st_mode):
        raise OutputRefused(given, f"is a directory; {option} names the file to write")
    elif odd_file(st.st_mode):
        raise OutputRefused(
            given,
            f"is {odd_file(st.st_mode)}, not a regular file: spag writes a file by renaming "
            f"a finished one into place and never replaces one of these ({option})",
        )
    elif read_only(target, st):
        raise OutputRefused(given, f"is read-only: refusing to replace it ({option})")
    elif replace == "no":
        raise OutputExists(
            given, f"exists: pass --overwrite to replace a file spag wrote, or choose a new path ({option})"
        )
    elif replace == "ours" and not written_by_spag(target):
        raise OutputRefused(
            given,
            f"was not written by spag (or was changed since): refusing to replace it; move "
            f"it away or choose another path ({option})",
        )
    return target


def _check_new_file(target: Path, option: str) -> None:
    """A file can be created at ``target``: its nearest existing parent is a folder we may write into."""
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputRefused(target, f"cannot be written: {parent} is a file, not a folder ({option})")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise OutputRefused(
                    target, f"cannot be written: the folder {parent} is not writable ({option})"
                )
            return


# Errors of the file system itself (a write names no file), told as "cannot be written" naming the target.
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)


def _write_error(exc: OSError, target: Path, tmp: Path) -> DataError | None:
    """A one-line DataError naming ``target`` for an error of writing its temporary file ``tmp`` (None for
    an error about another file: an input read inside the block, say)."""
    if exc.filename is not None:
        if Path(str(exc.filename)) != tmp:
            return None
        return DataError(target, None, f"cannot be written: {exc.strerror or exc}")
    code = exc.errno
    if code is None:  # pyarrow's errors carry the code in their text only
        code = next((c for c in _DISK_ERRORS if os.strerror(c) in str(exc)), None)
    if code not in _DISK_ERRORS:
        return None
    return DataError(target, None, f"cannot be written: {os.strerror(code)}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, replace: Replace = "no") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only if the block succeeds.

    The output rule (:func:`check_output_file`) is applied before and again at the end; ``replace`` says
    what an existing file may be replaced by. A file written to a new path or with ``replace="ours"`` is
    recorded in its folder's manifest, so a later ``--overwrite`` knows it as spag's; so is every file
    written into a folder that is itself a spag output.
    """
    target = check_output_file(path, replace=replace)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise DataError(
            target, None, f"cannot be written: {exc.strerror or exc} (in the folder {target.parent})"
        ) from None
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, usual_mode())  # mkstemp makes 0600; a finished file gets the usual mode
    try:
        try:
            yield tmp_path
        except OSError as exc:
            error = _write_error(exc, target, tmp_path)
            if error is None:
                raise
            raise error from None
        target = check_output_file(path, replace=replace)  # something may have appeared meanwhile
        _publish_file(tmp_path, target, replace)
        if replace != "any" or read_manifest(target.parent).get("kind"):
            record_written(target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _publish_file(tmp: Path, target: Path, replace: Replace) -> None:
    """Rename ``tmp`` onto ``target``; a new file (``replace="no"``) by a hard link, which fails rather than
    replace a file that appeared since the check (a second writer's)."""
    if replace != "no":
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise OutputExists(
            target, "appeared while spag was writing it (another writer?): left as it is"
        ) from None
    except OSError:  # a file system without hard links: the check above has to do
        os.replace(tmp, target)
        return
    tmp.unlink()


def write_text_atomic(path: str | os.PathLike, text: str, *, replace: Replace = "no") -> None:
    with atomic_path(path, replace=replace) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any, *, replace: Replace = "no") -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n", replace=replace)


def write_jsonl_atomic(
    path: str | os.PathLike, records: Iterable[Mapping], *, replace: Replace = "no"
) -> int:
    count = 0
    with atomic_path(path, replace=replace) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_table_atomic(
    path: str | os.PathLike, records: list[Mapping], schema=None, *, replace: Replace = "no"
) -> None:
    """Write records as Parquet (``.parquet``) or JSON lines (anything else), atomically."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(list(records), schema=schema)
        with atomic_path(path, replace=replace) as tmp:
            pq.write_table(table, tmp)
    else:
        write_jsonl_atomic(path, records, replace=replace)


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


# ------------------------------------------------------------------------------- folders

MARKER = MANIFEST  # the manifest of a folder that is a command's output names the command ("kind")
LOCK_SUFFIX = ".spag-lock"


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


def _others(folder: Path) -> list[Path]:
    """The entries of ``folder`` apart from spag's manifest and lock files."""
    return [p for p in folder.iterdir() if not p.name.startswith(MARKER) and not p.name.endswith(LOCK_SUFFIX)]


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
    if not _others(target):
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
    command = (
        " ".join(["spag", *sys.argv[1:]])
        if Path(sys.argv[0]).name in ("spag", "cli.py")
        else " ".join(sys.argv)
    )
    return {
        "pid": os.getpid(),
        "user": getpass.getuser(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": command[:120],
    }


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
            raise OutputRefused(
                output,
                f"is being written by another spag process ({holder}): wait for it to "
                "end, or choose another output",
            ) from None
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
        return (
            f"pid {info['pid']} of {info['user']} on {info['host']}, since {info['since']}: {info['command']}"
        )
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


def claim_files(
    outputs: Mapping[str, str | os.PathLike | None], *, overwrite: bool = False
) -> dict[str, Path]:
    """Claim a command's file outputs (option -> path; None skipped) before any work: each must pass the
    output rule (:func:`spag.runtime.outputs.check_output_file`, with ``--overwrite`` as given) and is locked for this
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


# ----------------------------------------------------------- partial work beside a DVC output

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
    (and then only what spag recorded in it: see :func:`spag.runtime.outputs.publish_dir`).
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
