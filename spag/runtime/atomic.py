"""The atomic-write helper every module writes its files through, and the output rule it applies.

A killed step must never leave a file that looks finished: every write goes to a temporary file beside
the target and is renamed into place (:func:`atomic_path`, and ``write_*_atomic`` on top of it). A path
that exists is replaced only as the caller's :data:`Replace` allows: by default never; with
``--overwrite`` only a regular file spag wrote (its folder's manifest says so). A device node, FIFO or
socket is never replaced, nor is a read-only file; a symlink is followed (the file it names is written,
the link kept), a dangling one refused (:func:`check_output_file`). A refusal is one line
(:class:`~spag.runtime.errors.OutputRefused`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from spag.runtime.errors import DataError, OutputExists, OutputRefused
from spag.runtime.manifest import read_manifest, record_written, usual_mode, written_by_spag

# What an existing target may be replaced by a write: "no" (a new file only: the default), "ours" (a file
# spag wrote, by its record in the manifest: what --overwrite allows) or "any" (a regular file at a path
# spag owns outright: its own working files, a DVC stage's declared output, which DVC deletes and restores).
Replace = Literal["no", "ours", "any"]


def replace_mode(overwrite: bool) -> Replace:
    """The :data:`Replace` mode of a command's ``--overwrite``."""
    return "ours" if overwrite else "no"


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
