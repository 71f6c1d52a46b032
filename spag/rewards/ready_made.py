"""Ready-made training rows: the original project's imitation file (``train_imitation_gpt4.json``:
``query``/``target`` and a ``weight``), or this project's ``prompt``/``completion`` rows, used as they are
instead of rows built from games (``teacher.rows``, ``spag imitation-data`` on such a file).

A ``query`` is the original's whole model input (its rules, history and "### Response:" framing), so its row
is a raw prompt; a ``prompt`` is a user message and is rendered like any other. The role a row teaches is
its ``role`` field (one of the game's roles), or what the game reads from the prompt
(:meth:`spag.game.base.Game.role_in_prompt`: Adversarial Taboo's "You are the attacker", Kuhn poker's
"You are Player 0"), or none.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from spag.game.base import Game
from spag.models.chat import RawPrompt
from spag.rewards.rows import episode_id, make_row
from spag.rewards.sft import prompt_completion
from spag.runtime.atomic import write_table_atomic
from spag.runtime.errors import DataError, collect_or_raise
from spag.runtime.records import read_records


def _ready_made_number(
    record: Mapping, key: str, index: int, source: str, non_negative: bool = False
) -> float:
    """A ready-made record's ``weight`` or ``reward``: 1 when absent, else a finite number."""
    value = record.get(key)
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(source, index, f"{key!r} must be a number, got {value!r}")
    if non_negative and value < 0:
        raise DataError(source, index, f"{key!r} must not be negative, got {value!r}")
    return float(value)


def _role(record: Mapping, prompt: str, game: Game, index: int, source: str) -> str | None:
    """The role a ready-made row teaches: its ``role`` (one of ``game``'s), else the one its prompt addresses."""
    role = record.get("role")
    if role is None:
        return game.role_in_prompt(prompt)
    if role not in game.roles:
        raise DataError(
            source, index, f"'role' {role!r} is not a role of {game.title} ({', '.join(game.roles)})"
        )
    return role


def ready_made_rows(
    items: list[tuple[int, Mapping]], source: str, errors: list[DataError] | None, game: Game
) -> list[dict]:
    """Ready-made imitation rows of ``game``: the original project's ``query``/``target`` file, or this
    project's ``prompt``/``completion`` rows. Reward and weight are the record's (1 where it has none).

    A ``query`` is the original's whole model input (its rules, history and "### Response:" framing), so
    its row is marked ``raw_prompt`` and goes to the model as it is; a ``prompt`` is a user message and is
    rendered like any other.
    """
    rows = []
    for index, record in items:
        try:
            prompt, completion = prompt_completion(record, index, source)
            weight = _ready_made_number(record, "weight", index, source, non_negative=True)
            reward = _ready_made_number(record, "reward", index, source)
            role = _role(record, prompt, game, index, source)
        except DataError as error:
            collect_or_raise(error, errors)
            continue
        target = record.get("target_word")
        # a query is the original's whole input; a ready-made prompt's history lines are unknown (no bounds)
        rows.append(
            make_row(
                RawPrompt(prompt) if "query" in record else prompt,
                completion,
                reward=reward,
                weight=weight,
                role=role,
                target_word=target if isinstance(target, str) else None,
                episode=episode_id(record, index),
            )
        )
    return rows


READY_MADE_FILE = "ready_made.parquet"
_READY_MADE_SHAPES = (("query", "target"), ("prompt", "completion"))
_READY_MADE_EXTRAS = (("weight", "float"), ("reward", "float"), ("role", "string"), ("target_word", "string"))


def import_ready_made_rows(source: str | os.PathLike, output_dir: str | os.PathLike, game: Game) -> int:
    """A ready-made imitation file (the original's ``train_imitation_gpt4.json``: ``query``, ``target`` and
    possibly ``weight``) copied into ``output_dir/ready_made.parquet``, where :func:`build_imitation_set`
    takes it up as rows: the ``query`` used as the whole model input, the ``weight`` kept.

    Every record must have the same shape (query/target, or prompt/completion); the first bad one raises
    DataError naming it. Returns the number of records.
    """
    import pyarrow as pa

    records = read_records(source)
    if not records:
        raise DataError(source, None, "no rows to import")
    shape = next((s for s in _READY_MADE_SHAPES if set(s) <= records[0].keys()), None)
    if shape is None:
        raise DataError(source, 0, "expected query/target (or prompt/completion) fields")
    columns = [(name, pa.string()) for name in shape]
    columns += [(name, pa.float64() if kind == "float" else pa.string()) for name, kind in _READY_MADE_EXTRAS]
    errors: list[DataError] = []
    clean = []
    for index, record in enumerate(records):
        if not set(shape) <= record.keys() or "history" in record:
            raise DataError(source, index, f"expected {shape[0]}/{shape[1]} fields like the first record")
        ready_made_rows([(index, record)], str(source), errors, game)  # the same checks as at use
        if errors:
            raise errors[0]
        clean.append({name: record.get(name) for name, _ in columns})
    write_table_atomic(
        Path(output_dir) / READY_MADE_FILE, clean, schema=pa.schema(columns)
    )  # a pipeline stage's output
    return len(clean)
