"""Atomic file writes and small tabular I/O helpers shared by every step.

A killed step must never leave a file that looks finished: everything is written to a temporary file
beside the target and renamed into place.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """Bad input: the message is one line naming the file and the record."""

    def __init__(self, source: str | os.PathLike, index: int | None, message: str):
        self.source = str(source)
        self.index = index
        where = f"{self.source}" + (f": record {index}" if index is not None else "")
        super().__init__(f"{where}: {message}")


def collect_or_raise(error: DataError, errors: list[DataError] | None) -> None:
    """Skip-and-report when the caller collects ``errors``; otherwise the first bad record raises."""
    if errors is None:
        raise error
    errors.append(error)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes 0600; a finished file gets the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[Mapping]) -> int:
    count = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_table_atomic(path: str | os.PathLike, records: list[Mapping], schema=None) -> None:
    """Write records as Parquet (``.parquet``) or JSON lines (anything else), atomically."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(list(records), schema=schema)
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)
    else:
        write_jsonl_atomic(path, records)


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


def check_output_file(path: str | os.PathLike, option: str) -> None:
    """DataError unless ``path`` can become a file: not a directory, under no parent that is a file.

    For commands that write their result last, after minutes of work: they check this first.
    """
    target = Path(path)
    if target.is_dir():
        raise DataError(target, None, f"is a directory; {option} names the file to write")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise DataError(target, None, f"cannot be written: {parent} is a file, not a folder ({option})")
            break
