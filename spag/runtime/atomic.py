"""The atomic-write helper every file and output folder of spag goes through.

A killed step must never leave a file that looks finished: a file is written to a temporary file beside its
target and renamed into place (:func:`atomic_path`, and ``write_*_atomic`` on top of it); a folder is built
under another name and moved into place whole (:func:`publish_folder`). A symlink is followed (the file it
names is written, the link kept); a dangling one is refused. ``new=True`` writes a file that must not exist
yet: it fails rather than replace one that appeared meanwhile (another writer's).

Which outputs a command may replace is not decided here: the harness (:mod:`spag.harness.rule`) claims a
command's outputs before its work and watches the writes (:func:`watch`), to check them again and record
what spag wrote. Without a watcher (a library call, a test) a write simply lands, as ``open`` would.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from spag.runtime.errors import DataError, OutputExists, OutputRefused


class Watcher(Protocol):
    """What the harness does around a write (:mod:`spag.harness.rule`)."""

    def check(self, target: Path) -> None:
        """Raise OutputRefused when ``target`` may not be written (again, just before it is replaced)."""

    def written(self, target: Path) -> None:
        """``target`` was just written."""

    def publish(self, staging: Path, output: Path, last: str | None) -> Path | None:
        """Move the finished folder ``staging`` into place as ``output``; None to leave it to the helper."""


_WATCHERS: list[Watcher] = []


def watch(watcher: Watcher) -> None:
    """Have ``watcher`` see every write of this process from now on (once, however often it is called)."""
    if all(w is not watcher for w in _WATCHERS):
        _WATCHERS.append(watcher)


def usual_mode() -> int:
    """The mode a new file gets here (0o666 less the umask): mkstemp makes its files 0600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


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


def _check(target: Path) -> None:
    for watcher in _WATCHERS:
        watcher.check(target)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, new: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only if the block succeeds (with
    ``new``, only if no file is there by then: OutputExists otherwise)."""
    target = followed(path)
    if new and (target.exists() or target.is_symlink()):
        raise OutputExists(target, "exists: a new file is not written over another")
    _check(target)
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
        target = followed(path)
        _check(target)  # something may have appeared meanwhile
        _publish_file(tmp_path, target, new)
        for watcher in _WATCHERS:
            watcher.written(target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _publish_file(tmp: Path, target: Path, new: bool) -> None:
    """Rename ``tmp`` onto ``target``; a ``new`` file by a hard link, which fails rather than replace a file
    that appeared since (a second writer's)."""
    if not new:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise OutputExists(
            target, "appeared while spag was writing it (another writer?): left as it is"
        ) from None
    except OSError:  # a file system without hard links
        if target.exists():
            raise OutputExists(target, "appeared while spag was writing it (another writer?): left as it is")
        os.replace(tmp, target)
        return
    tmp.unlink()


def publish_folder(staging: str | os.PathLike, output: str | os.PathLike, last: str | None = None) -> Path:
    """Move the finished folder ``staging`` into place as ``output``; return where it went. A watcher that
    owns ``output`` moves it (beside a user's files, ``last`` the last entry: the one that says the output
    is finished); otherwise ``output`` must be absent or an empty folder, and one rename does it."""
    staging, output = Path(staging), followed(output)
    for watcher in _WATCHERS:
        placed = watcher.publish(staging, output, last)
        if placed is not None:
            return placed
    if output.is_dir() and not any(output.iterdir()):
        output.rmdir()
    elif output.exists():
        raise OutputExists(output, f"exists: the finished output is left in {staging}")
    os.replace(staging, output)
    return output


def write_text_atomic(path: str | os.PathLike, text: str, *, new: bool = False) -> None:
    with atomic_path(path, new=new) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any, *, new: bool = False) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n", new=new)


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[Mapping], *, new: bool = False) -> int:
    count = 0
    with atomic_path(path, new=new) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_table_atomic(
    path: str | os.PathLike, records: list[Mapping], schema=None, *, new: bool = False
) -> None:
    """Write records as Parquet (``.parquet``) or JSON lines (anything else), atomically."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(list(records), schema=schema)
        with atomic_path(path, new=new) as tmp:
            pq.write_table(table, tmp)
    else:
        write_jsonl_atomic(path, records, new=new)
