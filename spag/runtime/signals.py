"""SIGTERM handled like Ctrl-C: the run unwinds through its ``finally`` blocks, so finished work is written.

A cluster scheduler, ``timeout`` or ``kill`` sends SIGTERM; Python's default is to die at once, losing
the finished games not yet in a shard. Under :func:`graceful_termination` SIGTERM raises
:class:`Terminated` in the main thread instead; a second SIGTERM during the flush is ignored.

A command (:func:`command_signals`) also turns Ctrl-C into :class:`Interrupted` rather than Python's
KeyboardInterrupt, which typer turns into a silent exit 130: the command's one line would be lost.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, like KeyboardInterrupt, so ``except Exception`` does not eat it."""


class Interrupted(BaseException):
    """Ctrl-C (SIGINT) arrived in a command (see the module docstring)."""


STOPS = (KeyboardInterrupt, Interrupted, Terminated)  # what a stopped command or stage unwinds with


def stopped(stop: BaseException) -> tuple[str, int]:
    """The one line (after ``error: ``) and the exit code of a command or pipeline stage that ``stop`` (one of
    :data:`STOPS`) ended: what it left is the exception's own words (``spag analyze``: "the query was
    stopped"), or what every command and stage does when stopped (finished work is kept)."""
    left = str(stop) or "finished work was kept"
    if isinstance(stop, Terminated):
        return f"terminated (SIGTERM); {left}", EXIT_TERMINATED
    return f"interrupted (Ctrl-C); {left}", EXIT_INTERRUPTED


_held: list[BaseException] = []  # a signal that arrived inside uninterrupted(), raised at its end
_depth = 0


def _raise(stop: BaseException) -> None:
    if _depth:
        _held.append(stop)
        return
    raise stop


def _raise_interrupted(signum, frame) -> None:
    _raise(Interrupted())


def _raise_terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the flush finish
    _raise(Terminated())


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """A step that must end whole (a shard written *and* counted as written): Ctrl-C or SIGTERM arriving
    inside it (under :func:`command_signals` or :func:`graceful_termination`) is raised when it ends."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _held:
            stop = _held[0]
            _held.clear()
            raise stop


@contextlib.contextmanager
def graceful_termination() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def command_signals() -> Iterator[None]:
    """SIGTERM as :class:`Terminated` (:func:`graceful_termination`) and Ctrl-C as :class:`Interrupted`."""
    previous = signal.signal(signal.SIGINT, _raise_interrupted)
    try:
        with graceful_termination():
            yield
    finally:
        signal.signal(signal.SIGINT, previous)
