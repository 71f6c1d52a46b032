"""Atomic file writes and small tabular I/O helpers shared by every step.

A killed step must never leave a file that looks finished: everything is written to a temporary file
beside the target and renamed into place.

Every write goes through :func:`atomic_path`, which applies the one output rule of every command:

- a path that exists is replaced only if it is a regular file spag wrote, and only when the caller asks
  (``--overwrite``); anything else is refused with one line (:class:`OutputRefused`);
- a device node, FIFO or socket is never replaced, nor is a read-only file;
- a symlink is followed (the file it names is written, the link is kept); a dangling one is refused.

What spag wrote is recorded in the folder it wrote to, in :data:`MANIFEST` (``files``: each name with its
inode, size and modification time, so a file changed or replaced since is no longer spag's). The same file
marks a folder that is itself the output of a command (``kind``, see :mod:`spag.outputs`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal


class DataError(ValueError):
    """Bad input: the message is one line naming the file and the record."""

    def __init__(self, source: str | os.PathLike, index: int | None, message: str):
        self.source = str(source)
        self.index = index
        where = f"{self.source}" + (f": record {index}" if index is not None else "")
        super().__init__(f"{where}: {message}")


class OutputRefused(DataError):
    """An output path holds something this command may not replace (or write through)."""

    def __init__(self, path: str | os.PathLike, message: str):
        super().__init__(path, None, message)


class OutputExists(OutputRefused):
    """A new file was to be written and one is there already (a writer that picks names picks another)."""


def collect_or_raise(error: DataError, errors: list[DataError] | None) -> None:
    """Skip-and-report when the caller collects ``errors``; otherwise the first bad record raises."""
    if errors is None:
        raise error
    errors.append(error)


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

_ODD_FILES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
              (stat.S_ISSOCK, "a socket"))


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
        raise OutputRefused(path, f"is a symlink to {real}, which does not exist: refusing to create a file "
                                  f"through it ({option})")
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
        raise OutputRefused(given, f"is {odd_file(st.st_mode)}, not a regular file: spag writes a file by renaming "
                                   f"a finished one into place and never replaces one of these ({option})")
    elif read_only(target, st):
        raise OutputRefused(given, f"is read-only: refusing to replace it ({option})")
    elif replace == "no":
        raise OutputExists(given, f"exists: pass --overwrite to replace a file spag wrote, or choose a new path "
                                   f"({option})")
    elif replace == "ours" and not written_by_spag(target):
        raise OutputRefused(given, f"was not written by spag (or was changed since): refusing to replace it; move "
                                   f"it away or choose another path ({option})")
    return target


def _check_new_file(target: Path, option: str) -> None:
    """A file can be created at ``target``: its nearest existing parent is a folder we may write into."""
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputRefused(target, f"cannot be written: {parent} is a file, not a folder ({option})")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise OutputRefused(target, f"cannot be written: the folder {parent} is not writable ({option})")
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
        raise DataError(target, None, f"cannot be written: {exc.strerror or exc} (in the folder {target.parent})") \
            from None
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
        raise OutputExists(target, "appeared while spag was writing it (another writer?): left as it is") from None
    except OSError:  # a file system without hard links: the check above has to do
        os.replace(tmp, target)
        return
    tmp.unlink()


def write_text_atomic(path: str | os.PathLike, text: str, *, replace: Replace = "no") -> None:
    with atomic_path(path, replace=replace) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any, *, replace: Replace = "no") -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n", replace=replace)


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[Mapping], *, replace: Replace = "no") -> int:
    count = 0
    with atomic_path(path, replace=replace) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_table_atomic(path: str | os.PathLike, records: list[Mapping], schema=None, *,
                       replace: Replace = "no") -> None:
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


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file's content; DataError naming the file if it is missing, unreadable or binary."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(path, None, "no such file")
    except IsADirectoryError:
        raise DataError(path, None, "is a directory, expected a file")
    except OSError as exc:
        raise DataError(path, None, f"cannot be read ({exc.strerror or exc})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(path, None, f"is not UTF-8 text (a binary file?): bad byte at offset {exc.start}")


def read_records(path: str | os.PathLike) -> list[dict]:
    """Read a JSON list, JSON lines, or Parquet (a file or a directory of ``*.parquet`` shards).

    Raises DataError naming the file (and line) on malformed input.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(path, None, "no such file or directory")
    if path.is_dir():
        shards = sorted(path.glob("*.parquet"))
        records: list[dict] = []
        for shard in shards:
            records.extend(read_records(shard))
        return records
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a broken file
            raise DataError(path, None, f"not a readable Parquet file ({exc.__class__.__name__}: {exc})")
    text = read_text(path)
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(path, None, f"not valid JSON (line {exc.lineno}: {exc.msg})")
        for i, record in enumerate(data):
            if not isinstance(record, dict):
                raise DataError(path, i, f"expected an object, got {type(record).__name__}")
        _check_text(data, path, escaped=text)
        return data
    records = []
    # Only "\n" ends a record: str.splitlines() would also split at U+2028, U+2029, U+0085 and other
    # characters that json.dumps(ensure_ascii=False) leaves raw inside a string.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(path, len(records), f"line {lineno} is not valid JSON ({exc.msg})")
        if not isinstance(record, dict):
            raise DataError(path, len(records), f"line {lineno}: expected an object")
        records.append(record)
    _check_text(records, path, escaped=text)
    return records


def _check_text(records: list, path: Path, escaped: str) -> None:
    """DataError naming the record that holds a lone surrogate (JSON's ``"\\ud800"``): a string no file
    format can store, which would fail much later, in a writer, naming nothing."""
    if "\\ud" not in escaped.lower():  # only a \uD800-\uDFFF escape can make one
        return

    def lone(value) -> bool:
        if isinstance(value, str):
            return any("\ud800" <= ch <= "\udfff" for ch in value)
        if isinstance(value, dict):
            return any(lone(k) or lone(v) for k, v in value.items())
        if isinstance(value, list):
            return any(lone(v) for v in value)
        return False

    for index, record in enumerate(records):
        if lone(record):
            raise DataError(path, index, "holds a lone surrogate (a \\uD800-\\uDFFF escape on its own): "
                                         "not valid Unicode text")


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
                raise DataError(path, None, f"{name} is the same file as {other} ({what}); choose another path")
            if index < first_output and known.is_dir() and any(same(parent, known) for parent in
                                                               path.absolute().parents):
                raise DataError(path, None, f"{name} is inside the folder {other} (the input); choose a "
                                            "path outside it")
        seen.append((name, path))
