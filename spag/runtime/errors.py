"""Every error type of spag that a user sees as one line (the command line prints it and exits with code 2).

Nothing here imports any other part of spag, so every layer can raise and catch these.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


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


class SettingError(ValueError):
    """A setting the code that reads it refuses: ``keys`` (dotted, from the settings it was given; the one
    to change first leads) and the ``message``. The caller that knows where the settings came from names
    them (:class:`ParamsError` with its file and section), so no caller parses the text."""

    def __init__(self, keys: str | Sequence[str], message: str):
        self.keys = (keys,) if isinstance(keys, str) else tuple(keys)
        self.message = message
        super().__init__(f"{self.keys[0]}: {message}")

    @property
    def key(self) -> str:
        """The key to change first."""
        return self.keys[0]


class ParamsError(ValueError):
    """A one-line message naming the params file (or option) and the key."""

    def __init__(self, source: str | os.PathLike, key: str, message: str):
        super().__init__(f"{source}: {key}: {message}" if key else f"{source}: {message}")


class PlayerError(RuntimeError):
    """A backend could not produce a reply (endpoint down, bad model name, ...); the message says why."""


class BenchmarkError(RuntimeError):
    """A benchmark could not run (unknown task, datasets unavailable): one line for the user."""


class ArtifactError(DataError):
    """An artifact could not be had or is not the pinned file: one line naming it."""

    def __init__(self, what: str | os.PathLike, message: str):
        super().__init__(what, None, message)


class StaleEpisodes(DataError):
    """Episodes kept from an earlier run that this run cannot reuse (other words, settings or models)."""


class BaseModelError(RuntimeError):
    """The embedded model could not be fetched, verified or converted; the message says why."""


class AnalyzeError(ValueError):
    """A one-line message for the command line (no episodes found, a query that fails)."""


class UndeclaredParam(AttributeError):
    """A stage asked for a params key its dvc.yaml entry does not declare."""
