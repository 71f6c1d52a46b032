"""Progress bars and summary lines, the same for every command."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")


def progress(iterable: Iterable[T] | None = None, **kwargs) -> tqdm:
    """A tqdm progress bar on stderr; ``disable=None`` hides it when stderr is not a terminal."""
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("mininterval", 0.5)
    return tqdm(iterable, **kwargs)


def summary(command: str, text: str) -> None:
    """The one line every command ends with."""
    print(f"[spag {command}] {text}", file=sys.stderr, flush=True)


def error(text: str) -> None:
    """``error: TEXT`` on stderr, as one line (a library's multi-line message joined)."""
    print(f"error: {' '.join(str(text).split())}", file=sys.stderr, flush=True)


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (its class name when it has none): a library's
    multi-line error told in one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else exc.__class__.__name__
