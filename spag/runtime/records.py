"""Reading input records: JSON lists, JSON lines and Parquet (a file or a folder of shards), every problem a
:class:`~spag.runtime.errors.DataError` naming the file and the record."""

from __future__ import annotations

import json
import os
from pathlib import Path

from spag.runtime.errors import DataError


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
            raise DataError(
                path,
                index,
                "holds a lone surrogate (a \\uD800-\\uDFFF escape on its own): not valid Unicode text",
            )
