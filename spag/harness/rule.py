"""The output rule: which paths a command may write, and the record of what spag wrote.

A path that exists is replaced only as the command's claim allows (:data:`Replace`): by default never; with
``--overwrite`` only a regular file spag wrote (its folder's manifest says so). A device node, FIFO or
socket is never replaced, nor is a read-only file; a dangling symlink is refused
(:func:`check_output_file`). A refusal is one line (:class:`~spag.runtime.errors.OutputRefused`).

The harness claims a command's outputs before its work (:func:`claim_file`, and the folders of
:func:`spag.harness.claims.claim_output_dir`); the core then writes through :mod:`spag.runtime.atomic`, whose writes this
module watches once a claim is made (:func:`enforce`): each write is checked again as its claim says, and a
file written to a claimed path, or into a folder that is a spag output, is recorded in that folder's
manifest, so a later ``--overwrite`` knows it as spag's. A claimed folder is marked as its command's output
with the first file written into it, so a run that fails before writing leaves nothing behind.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

from spag.harness.folders import mark_output_dir, output_kind, publish_dir
from spag.harness.manifest import read_manifest, record_written, written_by_spag
from spag.runtime import atomic
from spag.runtime.atomic import followed
from spag.runtime.errors import OutputExists, OutputRefused

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


def check_output_file(path: str | os.PathLike, option: str = "the output", replace: Replace = "no") -> Path:
    """Apply the output rule to a file to be written at ``path``; return the path to write (a symlink
    followed). OutputRefused (one line, naming ``option``) when it may not be written:

    - a folder, a device node, a FIFO or a socket is there;
    - a read-only file is there, or the folder it would go into cannot be written;
    - a file is there and ``replace`` is "no", or "ours" and spag did not write it (or it changed since);
    - a parent of it is a file.

    Commands call it for each output before any work (:func:`claim_file`), and every write checks again.
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


def _key(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(path))


class _Rule:
    """The watcher of :mod:`spag.runtime.atomic`'s writes: the claims of this process, and what they say."""

    def __init__(self):
        self.files: dict[Path, Replace] = {}  # claimed file -> what may be replaced there
        self.folders: dict[Path, str] = {}  # claimed output folder -> the kind it is marked with

    def check(self, target: Path) -> None:
        check_output_file(target, replace=self.files.get(_key(target), "any"))
        # A claimed folder is marked before anything lands in it (the write's temporary file included): a
        # process killed just after a write leaves a folder that says whose it is, which a resume accepts.
        folder = target.parent
        for claimed in [*reversed(folder.parents), folder] if self.folders else ():  # the outer first
            kind = self.folders.get(_key(claimed))
            if kind is not None and output_kind(claimed) is None:
                mark_output_dir(claimed, kind)
                if output_kind(claimed.parent):  # an output folder inside another: one of its entries
                    record_written(claimed)

    def written(self, target: Path) -> None:
        if self.files.get(_key(target), "any") != "any" or read_manifest(target.parent).get("kind"):
            record_written(target)

    def forget(self) -> None:
        """The claims of a command that has ended."""
        self.files.clear()
        self.folders.clear()

    def publish(self, staging: Path, output: Path, last: str | None) -> Path | None:
        kind = self.folders.get(_key(output))
        return None if kind is None else publish_dir(staging, output, kind, last=last)


RULE = _Rule()


def enforce() -> None:
    """Watch this process's writes with the rule (what every claim does first)."""
    atomic.watch(RULE)


def claim_file(path: str | os.PathLike, option: str = "the output", replace: Replace = "no") -> Path:
    """Check ``path`` by the rule (:func:`check_output_file`) and claim it: its writes are checked again
    with ``replace`` and recorded. Returns the path to write (a symlink followed)."""
    enforce()
    target = check_output_file(path, option, replace)
    RULE.files[_key(target)] = replace
    return target


def claim_folder(path: str | os.PathLike, kind: str) -> None:
    """Claim the output folder ``path`` for ``spag <kind>`` (checked by :mod:`spag.harness.folders`): it is
    marked just before the first file is written into it, and a finished folder published there is moved
    in as that command's output."""
    enforce()
    RULE.folders[_key(path)] = kind
