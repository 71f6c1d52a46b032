"""The training row: what ``spag reward`` and ``spag imitation-data`` write and the trainers read.

A row is ``prompt, completion, reward, weight, role, kind, target_word, turn, episode``:

- ``prompt`` is the user-message text asking ``role`` for its next utterance (or a general instruction);
- ``completion`` is what the model should say;
- ``reward`` is the utterance's share of its game's reward; ``weight`` re-balances the two roles;
- ``kind`` is ``game`` for game rows and ``sft`` for general instruction rows (reward 0, weight 1);
- ``history_bounds`` (game rows) are the character offsets of the prompt's history lines, so that a row too
  long for the trainer's ``max_length`` loses its oldest history lines, never its rules or target word
  (:func:`spag.game.prompts.build_prompt_with_bounds`); null for other rows;
- ``raw_prompt`` (only in files that hold such rows) is true for a ready-made row of the original project,
  whose ``query`` already is the model's whole input: it is used as it is, not wrapped in a chat template.

This module is the one home of the row: its columns and Parquet schema, writing, reading and validation.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from spag.models.chat import RawPrompt
from spag.runtime.atomic import write_table_atomic
from spag.runtime.errors import DataError
from spag.runtime.records import read_records

GAME = "game"
SFT = "sft"
KINDS = (GAME, SFT)
ROW_COLUMNS = (
    "prompt",
    "completion",
    "reward",
    "weight",
    "role",
    "kind",
    "target_word",
    "turn",
    "episode",
    "history_bounds",
)
REQUIRED_COLUMNS = ("prompt", "completion")
RAW_PROMPT = "raw_prompt"


def row_schema(raw_prompt: bool = False):
    """The Parquet schema of a training row (explicit, so empty or all-null columns keep their type).

    ``raw_prompt`` adds that column, for files with ready-made rows of the original project.
    """
    import pyarrow as pa

    return pa.schema(
        [
            ("prompt", pa.string()),
            ("completion", pa.string()),
            ("reward", pa.float64()),
            ("weight", pa.float64()),
            ("role", pa.string()),
            ("kind", pa.string()),
            ("target_word", pa.string()),
            ("turn", pa.int64()),
            ("episode", pa.string()),
            ("history_bounds", pa.list_(pa.int64())),
        ]
        + ([(RAW_PROMPT, pa.bool_())] if raw_prompt else [])
    )


# ------------------------------------------------------------------------------------------ making


def make_row(
    prompt: str,
    completion: str,
    *,
    kind: str = GAME,
    reward: float | None = None,
    weight: float = 1.0,
    role: str | None = None,
    target_word: str | None = None,
    turn: int | None = None,
    episode: str | None = None,
    history_bounds: list[int] | None = None,
) -> dict:
    """A training row with every column of :data:`ROW_COLUMNS`; a ``prompt`` that is a
    :class:`~spag.game.prompts.RawPrompt` (the model's whole input) also gets ``raw_prompt: true``."""
    row = {
        "prompt": str(prompt),
        "completion": completion,
        "reward": reward,
        "weight": weight,
        "role": role,
        "kind": kind,
        "target_word": target_word,
        "turn": turn,
        "episode": episode,
        "history_bounds": history_bounds,
    }
    if isinstance(prompt, RawPrompt):
        row[RAW_PROMPT] = True
    return row


def episode_id(record: Mapping, index: int) -> str:
    """A row's ``episode``: its game record's ``id``, else the record's position in its file."""
    ident = record.get("id")
    return str(ident if ident is not None else index)


# ------------------------------------------------------------------------------------------ writing

OUTPUT_SUFFIXES = (".parquet", ".jsonl")


def check_output(output: str | os.PathLike) -> None:
    if Path(output).suffix not in OUTPUT_SUFFIXES:
        raise DataError(output, None, "the output must end in .parquet or .jsonl")


def write_rows(rows: list[dict], output: str | os.PathLike) -> None:
    """Write rows atomically: Parquet for ``.parquet``, JSON lines for ``.jsonl`` (``replace``: what an
    existing file may be replaced by, :func:`spag.runtime.atomic.atomic_path`)."""
    check_output(output)
    raw = any(row.get(RAW_PROMPT) for row in rows)
    if raw:
        rows = [{**row, RAW_PROMPT: bool(row.get(RAW_PROMPT))} for row in rows]
    write_table_atomic(output, rows, schema=row_schema(raw) if Path(output).suffix == ".parquet" else None)


# ------------------------------------------------------------------------------------------ reading


def _number(record: Mapping, key: str, default: float | None, source, index: int) -> float | None:
    value = record.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(source, index, f"{key!r} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise DataError(source, index, f"{key!r} must be finite, got {value!r}")
    return value


def validate_row(record: Mapping, index: int, source: str | os.PathLike = "<rows>") -> dict:
    """A clean copy of one training row, or a one-line DataError naming the record."""
    if not isinstance(record, Mapping):
        raise DataError(source, index, f"expected an object, got {type(record).__name__}")
    for key in REQUIRED_COLUMNS:
        if key not in record:
            raise DataError(source, index, f"missing field {key!r}")
        if not isinstance(record[key], str):
            raise DataError(source, index, f"{key!r} must be a string, got {type(record[key]).__name__}")
    if not record["prompt"].strip():
        raise DataError(source, index, "empty prompt")
    kind = record.get("kind") or GAME
    if kind not in KINDS:
        raise DataError(source, index, f"unknown kind {kind!r} (expected game or sft)")
    weight = _number(record, "weight", 1.0, source, index)
    if weight < 0:
        raise DataError(source, index, f"negative weight {weight}")
    reward = _number(record, "reward", None, source, index)
    raw = record.get(RAW_PROMPT)
    if raw is not None and not isinstance(raw, bool):
        raise DataError(source, index, f"{RAW_PROMPT!r} must be true or false, got {raw!r}")
    bounds = record.get("history_bounds")
    if bounds is not None:
        bounds = list(bounds)
        ends = len(record["prompt"])
        if bounds and (
            len(bounds) < 2
            or any(isinstance(b, bool) or not isinstance(b, int) for b in bounds)
            or sorted(bounds) != bounds
            or bounds[0] < 0
            or bounds[-1] > ends
        ):
            raise DataError(
                source, index, "'history_bounds' must be increasing character offsets into the prompt"
            )
    return {
        "prompt": record["prompt"],
        "completion": record["completion"],
        "reward": reward,
        "weight": weight,
        "kind": kind,
        "role": record.get("role"),
        RAW_PROMPT: bool(raw),
        "history_bounds": bounds,
    }


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Read and validate training rows (Parquet file or shard dir, JSONL, or JSON list)."""
    records = read_records(path)
    if not records:
        raise DataError(path, None, "no training rows")
    return [validate_row(record, i, path) for i, record in enumerate(records)]


def drop_history_lines(prompt: str, bounds: Sequence[int], k: int) -> str:
    """``prompt`` without its ``k`` oldest history lines (``bounds``: the row's ``history_bounds``)."""
    if not 0 <= k < len(bounds):
        raise ValueError(f"cannot drop {k} of {max(len(bounds) - 1, 0)} history lines")
    return prompt if k == 0 else prompt[: bounds[0]] + prompt[bounds[k] :]
