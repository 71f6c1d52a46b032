"""What spag wrote: the manifest of a folder (:data:`MANIFEST`, ``files``: each name with its inode, size and
modification time, so a file changed or replaced since is no longer spag's). The same file marks a folder
that is itself the output of a command (its ``kind``: :mod:`spag.harness.folders`)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock

from spag.runtime.atomic import usual_mode

MANIFEST = ".spag-output.json"
LOCK_SUFFIX = ".spag-lock"  # the lock file beside an output (spag.harness.locks): spag's, not an entry


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns]


@contextlib.contextmanager
def _manifest_locked(folder: Path) -> Iterator[Path]:
    """The manifest of ``folder`` under its lock (several writers may share a folder: the ranks of one play
    run, two commands writing beside each other). The lock is the manifest file's own (filelock's); a new
    manifest is renamed into place, so a writer that waited on the one it replaced opens the new one and
    waits again (filelock retries a lock file that lost its name)."""
    path = folder / MANIFEST
    with FileLock(path, thread_local=False, fallback_to_soft=False):
        yield path


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
