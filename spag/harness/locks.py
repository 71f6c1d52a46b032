"""One writer per output: a lock file beside the output (``.NAME.spag-lock``), held by filelock's
:class:`~filelock.FileLock` (the kernel's ``flock``), so a killed writer leaves no lock behind, at most the
small file, which the next writer reuses. The file says who writes (pid, user, host, command, start), so a
second writer stops at once with one line naming the first (:func:`writing`)."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from spag.harness.manifest import LOCK_SUFFIX
from spag.runtime.errors import OutputRefused


@dataclass
class _Held:
    lock: FileLock
    made: list[Path]  # the folders taking the lock made, removed again if nothing was written there
    count: int = 1


_HELD: dict[Path, _Held] = {}  # this process's locks by lock file: a writer that claims twice holds one


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


def _say_who(fd: int) -> None:
    """Write the holder into the lock file it has just taken (filelock's ``on_acquired``)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(_holder()) + "\n").encode(), 0)


def _who(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
        return (
            f"pid {info['pid']} of {info['user']} on {info['host']}, since {info['since']}: {info['command']}"
        )
    except (ValueError, KeyError, TypeError, OSError):
        return "a process that did not say who it is"


def acquire(output: str | os.PathLike, part: str | None = None) -> Path | None:
    """Take the lock of ``output`` (or count one more use of it, when this process holds it); OutputRefused
    naming the holder when another process holds it. None when no lock file can be made there (the
    output's own claim then refuses the path in a line)."""
    path = lock_path(output, part)
    if path in _HELD:
        _HELD[path].count += 1
        return path
    made = [p for p in reversed(path.parents) if not p.exists()]
    lock = FileLock(path, blocking=False, thread_local=False, fallback_to_soft=False, on_acquired=_say_who)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        _remove_made(made)
        raise OutputRefused(
            Path(output),
            f"is being written by another spag process ({_who(path)}): wait for it to end, or choose "
            "another output",
        ) from None
    except OSError:  # a file where a folder should be, a folder we may not write into: the claim says so
        _remove_made(made)
        return None
    _HELD[path] = _Held(lock, made)
    return path


def release(path: Path | None) -> None:
    """Give up one use of the lock :func:`acquire` returned; the last removes its file and folders."""
    held = _HELD.get(path) if path is not None else None
    if held is None:
        return
    held.count -= 1
    if held.count:
        return
    del _HELD[path]
    with contextlib.suppress(OSError):
        path.unlink()  # while still locked: a writer waiting on it sees it go and makes a new one
    held.lock.release()
    _remove_made(held.made)


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
    path = acquire(output, part)
    try:
        yield
    finally:
        release(path)
