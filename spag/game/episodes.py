"""Episodes: the original project's shape ``{target_word, max_turns, history: [{role, content}]}``.

Stored as Parquet with ``history`` as ``list<struct<role, content>>``; read from a JSON list (the
original results-file shape), JSON lines, or Parquet files and directories of shards. Fields beyond the
three required ones are kept as they are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from spag.game.rules import ROLES, WHOLE_WORD, judge_episode
from spag.io import DataError, read_records, write_json_atomic, write_jsonl_atomic, write_table_atomic

DEFAULT_MAX_TURNS = 5


def validate_episode(record: Mapping, index: int, source: str | os.PathLike = "<episodes>") -> dict:
    """Check one episode and return it as a plain dict; raise DataError naming the record otherwise."""
    if not isinstance(record, Mapping):
        raise DataError(source, index, f"expected an object, got {type(record).__name__}")
    episode = dict(record)
    target = episode.get("target_word")
    if not isinstance(target, str) or not target.strip():
        raise DataError(source, index, "missing or empty 'target_word'")
    if "max_turns" not in episode or episode["max_turns"] is None:
        episode["max_turns"] = DEFAULT_MAX_TURNS
    try:
        episode["max_turns"] = int(episode["max_turns"])
    except (TypeError, ValueError):
        raise DataError(source, index, f"'max_turns' is not an integer: {episode['max_turns']!r}")
    if episode["max_turns"] < 1:
        raise DataError(source, index, f"'max_turns' must be at least 1, got {episode['max_turns']}")
    history = episode.get("history")
    if not isinstance(history, list):
        raise DataError(source, index, "missing 'history' (a list of {role, content})")
    clean = []
    for j, utterance in enumerate(history):
        if not isinstance(utterance, Mapping):
            raise DataError(source, index, f"history[{j}] is not an object")
        role, content = utterance.get("role"), utterance.get("content")
        if role not in ROLES:
            raise DataError(source, index, f"history[{j}] has unknown role {role!r} (attacker|defender)")
        if not isinstance(content, str):
            raise DataError(source, index, f"history[{j}] content is not a string")
        clean.append({**utterance, "role": role, "content": content})
    episode["history"] = clean
    return episode


def read_episodes(path: str | os.PathLike) -> list[dict]:
    """Read and validate every episode in ``path``; the first bad record raises DataError."""
    return [validate_episode(r, i, path) for i, r in enumerate(read_records(path))]


def judged(episodes: Iterable[Mapping], rules: str = WHOLE_WORD) -> list[dict]:
    """Each episode with ``outcome`` and ``turns`` added by the judge (``rules``: whole-word or original)."""
    out = []
    for episode in episodes:
        verdict = judge_episode(episode, rules)
        out.append({**episode, "outcome": verdict.outcome, "turns": verdict.turns})
    return out


def write_episodes(episodes: list[Mapping], path: str | os.PathLike) -> None:
    """Write episodes atomically: Parquet for ``.parquet``, a JSON list for ``.json``, else JSON lines."""
    path = Path(path)
    if path.suffix == ".json":
        write_json_atomic(path, list(episodes))
    elif path.suffix == ".parquet":
        write_table_atomic(path, list(episodes))
    else:
        write_jsonl_atomic(path, episodes)


IMPORTED = "imported.parquet"


def import_episodes(
    source: str | os.PathLike,
    output_dir: str | os.PathLike,
    rules: str = WHOLE_WORD,
    exclude_words: Iterable[str] = (),
) -> tuple[list[dict], int]:
    """Existing episodes (e.g. the original project's GPT-4 games, ``gpt4_game_top30k_results.json``) as a
    teacher's episodes: validated, judged by ``rules`` and written to ``output_dir/imported.parquet``.

    Episodes on a word of ``exclude_words`` (the held-out evaluation words) are left out, so that the
    imitation data never covers them. Returns the episodes written and how many were left out. The first
    bad record raises DataError naming it.
    """
    excluded = {w.strip().lower() for w in exclude_words}
    kept, dropped = [], 0
    for index, record in enumerate(read_records(source)):
        episode = validate_episode(record, index, source)
        if episode["target_word"].strip().lower() in excluded:
            dropped += 1
            continue
        verdict = judge_episode(episode, rules)
        kept.append({
            "target_word": episode["target_word"],
            "max_turns": episode["max_turns"],
            "history": [{"role": u["role"], "content": u["content"]} for u in episode["history"]],
            "outcome": verdict.outcome,
            "turns": verdict.turns,
            "rules": rules,
            "word_index": index,
        })
    if not kept:
        raise DataError(source, None, "no episodes to import" + (f" ({dropped} on held-out words)" if dropped else ""))
    write_table_atomic(Path(output_dir) / IMPORTED, kept)
    return kept, dropped
