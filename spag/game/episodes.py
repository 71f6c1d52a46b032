"""Episodes: the original project's shape ``{target_word, max_turns, history: [{role, content}]}``.

Stored as Parquet with ``history`` as ``list<struct<role, content>>``; read from a JSON list (the
original results-file shape), JSON lines, or Parquet files and directories of shards. Fields beyond the
three required ones are kept as they are. The record is the same for every game: ``target_word`` holds the
game's target (Adversarial Taboo's secret word, Kuhn poker's deal), and an episode the play engine wrote
names its game and the game's settings and strategies (``game``, ``game_settings``, ``strategies``, JSON
text), so any game's episodes fit one schema and the judge can be asked again
(:func:`spag.game.episode_game`).

This module is the one home of the episode record: its validation, the Parquet schema of a played
episode (:func:`episode_schema`), the on-disk layout of a play run (:class:`EpisodeStore`: a folder of
shards, or one file) and the export to the original project's JSON.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from spag.game.base import Game, GameSettings
from spag.game.registry import episode_game
from spag.runtime.atomic import followed, write_json_atomic, write_jsonl_atomic, write_table_atomic
from spag.runtime.errors import DataError, OutputExists
from spag.runtime.records import read_records


def validate_episode(
    record: Mapping, index: int, source: str | os.PathLike = "<episodes>", game: Game | None = None
) -> dict:
    """Check one episode and return it as a plain dict; raise DataError naming the record otherwise. Its
    roles are its game's (the one it records, else ``game``, else Adversarial Taboo's)."""
    if not isinstance(record, Mapping):
        raise DataError(source, index, f"expected an object, got {type(record).__name__}")
    episode = dict(record)
    target = episode.get("target_word")
    if not isinstance(target, str) or not target.strip():
        raise DataError(source, index, "missing or empty 'target_word'")
    if any(unicodedata.category(ch).startswith("C") for ch in target):  # NUL, other controls, a BOM, ...
        raise DataError(source, index, f"'target_word' holds an invisible control character: {target!r}")
    if "max_turns" not in episode or episode["max_turns"] is None:
        episode["max_turns"] = GameSettings.model_fields["max_turns"].default  # the original's 5
    episode["max_turns"] = _whole_number(episode["max_turns"], source, index)
    if episode["max_turns"] < 1:
        raise DataError(source, index, f"'max_turns' must be at least 1, got {episode['max_turns']}")
    try:
        played = episode_game(episode, game)
    except ValueError as exc:
        raise DataError(source, index, str(exc)) from None
    try:
        played.check_target(
            target
        )  # Kuhn poker's "K-K" is no deal: the judge and the prompts would fail on it
    except ValueError as exc:
        raise DataError(source, index, f"'target_word': {exc}") from None
    roles = played.roles
    history = episode.get("history")
    if not isinstance(history, list):
        raise DataError(source, index, "missing 'history' (a list of {role, content})")
    clean = []
    for j, utterance in enumerate(history):
        if not isinstance(utterance, Mapping):
            raise DataError(source, index, f"history[{j}] is not an object")
        role, content = utterance.get("role"), utterance.get("content")
        if role not in roles:
            raise DataError(source, index, f"history[{j}] has unknown role {role!r} ({'|'.join(roles)})")
        if role != roles[j % 2]:  # the first role opens and the two speak in turn
            raise DataError(
                source,
                index,
                f"history[{j}] is the {role}'s, but the {roles[j % 2]} speaks there "
                f"(the {roles[0]} opens, then the players alternate)",
            )
        if not isinstance(content, str):
            raise DataError(source, index, f"history[{j}] content is not a string")
        clean.append({**utterance, "role": role, "content": content})
    episode["history"] = clean
    return episode


def _whole_number(value, source, index) -> int:
    """``max_turns`` as an int: an integer, a float with no fractional part, or digits; else DataError."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():  # 5.0; not 2.7, inf or nan
        return int(value)
    raise DataError(source, index, f"'max_turns' is not a whole number: {value!r}")


def read_episodes(path: str | os.PathLike, game: Game | None = None) -> list[dict]:
    """Read and validate every episode in ``path`` (``game``: of episodes that do not name theirs); the first
    bad record raises DataError."""
    return [validate_episode(r, i, path, game) for i, r in enumerate(read_records(path))]


def judged(episodes: Iterable[Mapping], game: Game) -> list[dict]:
    """Each episode with ``outcome`` and ``turns`` added by ``game``'s judge."""
    out = []
    for episode in episodes:
        verdict = game.judge_episode(episode)
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
    game: Game,
    exclude_words: Iterable[str] = (),
) -> tuple[list[dict], int]:
    """Existing episodes (e.g. the original project's GPT-4 games, ``gpt4_game_top30k_results.json``) as a
    teacher's episodes: validated, judged by ``game`` (its settings: Adversarial Taboo's ``rules``) and
    written to ``output_dir/imported.parquet``.

    Episodes on a word of ``exclude_words`` (the held-out evaluation words) are left out, so that the
    imitation data never covers them. Returns the episodes written and how many were left out. The first
    bad record raises DataError naming it.
    """
    excluded = {w.strip().lower() for w in exclude_words}
    kept, dropped = [], 0
    for index, record in enumerate(read_records(source)):
        episode = validate_episode(record, index, source, game)
        if episode["target_word"].strip().lower() in excluded:
            dropped += 1
            continue
        verdict = game.judge_episode(episode)
        kept.append(
            {
                **to_original_format(episode),
                "outcome": verdict.outcome,
                "turns": verdict.turns,
                **game.record(),
                "word_index": index,
            }
        )
    if not kept:
        raise DataError(
            source, None, "no episodes to import" + (f" ({dropped} on held-out words)" if dropped else "")
        )
    write_table_atomic(Path(output_dir) / IMPORTED, kept)  # a pipeline stage's output
    return kept, dropped


# ------------------------------------------------------------------------------ a play run on disk


# A played episode, every field once: (name, type, part). The parts: "game" (what happened), "player" (who
# played: the model names and content hashes of the opening role, Adversarial Taboo's attacker, and of the
# other), "setting" (every setting its games depend on: the sampling, the game's settings and strategies),
# "count" (what it cost). A resumed run keeps an episode only if its players and settings equal the run's
# (SETTINGS_CHECKED_ON_RESUME); the Parquet schema is built from it.
EPISODE_FIELDS = (
    ("target_word", "string", "game"),
    ("word_index", "int", "game"),
    ("max_turns", "int", "setting"),
    ("history", "history", "game"),
    ("outcome", "string", "game"),
    ("turns", "int", "game"),
    ("attacker_model", "string", "player"),
    ("defender_model", "string", "player"),
    ("attacker_fingerprint", "string", "player"),
    ("defender_fingerprint", "string", "player"),
    ("temperature", "float", "setting"),
    ("top_k", "int", "setting"),
    ("max_new_tokens", "int", "setting"),
    ("min_new_tokens", "int", "setting"),
    ("seed", "int", "setting"),
    ("empty_retries", "int", "setting"),
    ("game", "string", "setting"),
    ("game_settings", "string", "setting"),
    ("strategies", "string", "setting"),
    ("generated_tokens", "int", "count"),
    ("empty_replies", "int", "count"),
    ("truncated_replies", "int", "count"),
)
EPISODE_SETTINGS = tuple(name for name, _, part in EPISODE_FIELDS if part == "setting")
SETTINGS_CHECKED_ON_RESUME = EPISODE_SETTINGS + tuple(
    name for name, _, part in EPISODE_FIELDS if part == "player"
)


def episode_settings(config) -> dict:
    """The setting fields of an episode played under ``config`` (a :class:`spag.play.engine.PlayConfig`)."""
    s = config.sampling
    return {
        "max_turns": config.game.max_turns,
        "temperature": float(s.temperature),
        "top_k": s.top_k,
        "max_new_tokens": s.max_new_tokens,
        "min_new_tokens": s.min_new_tokens,
        "seed": config.seed,
        "empty_retries": s.empty_retries,
        **config.game.record(),
        "strategies": json.dumps(config.strategies.model_dump(mode="json"), sort_keys=True),
    }


def episode_schema():
    """The Parquet schema of an episode as the play engine writes it (:data:`EPISODE_FIELDS`)."""
    import pyarrow as pa

    utterance = pa.struct(
        [("role", pa.string()), ("content", pa.string()), ("n_tokens", pa.int64()), ("truncated", pa.bool_())]
    )
    types = {
        "string": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "history": pa.list_(utterance),
    }
    return pa.schema(
        [(name, types[kind]) for name, kind, _ in EPISODE_FIELDS],
        metadata={EPISODES_METADATA_KEY: b"episodes"},
    )


EPISODES_METADATA_KEY = b"spag"  # in the Parquet schema's metadata: a file spag wrote as episodes


def holds_spag_episodes(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a Parquet file of episodes written by spag (its schema's mark, or, for files
    written before the mark, every episode column); anything else is someone else's file."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception:  # noqa: BLE001 - not Parquet, unreadable: not ours
        return False
    if (schema.metadata or {}).get(EPISODES_METADATA_KEY) == b"episodes":
        return True
    newer = {
        "empty_retries",
        "game",
        "game_settings",
        "strategies",
    }  # columns files without the mark never had
    return set(episode_schema().names) - newer <= set(schema.names)


def what_is_in(path: Path) -> str:
    """What a file that is not spag's episodes holds, as a refusal says it."""
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except Exception:  # noqa: BLE001 - not Parquet, unreadable
        return "is not a Parquet file, so"
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"holds a Parquet table of other columns ({shown}),"
        if names
        else "holds a Parquet table of no columns,"
    )


class EpisodeStore:
    """Episodes on disk: a directory of Parquet shards, or one Parquet file rewritten atomically."""

    def __init__(self, output: str | os.PathLike, rank: int = 0, world: int = 1):
        self.single_file = Path(output).suffix == ".parquet"
        self.path = followed(output) if self.single_file else Path(output)  # a link's file, the link kept
        self.rank, self.world = rank, world
        if self.single_file and world > 1:
            raise ValueError("several ranks need a directory output, not one .parquet file")
        self._kept: list[dict] = []

    def _shard_prefix(self) -> str:
        return "shard-" if self.world == 1 else f"shard-r{self.rank}-"

    def drop_own(self) -> None:
        """Remove the episodes this process wrote before (its rank's shards, or the single file), so that
        every game is played again: only files named as its shards that hold spag's episodes."""
        if self.single_file:
            if self.path.is_file() and holds_spag_episodes(self.path):
                self.path.unlink()
            return
        for shard in self.path.glob(self._shard_prefix() + "*.parquet"):  # a single process's: every rank's
            if holds_spag_episodes(shard):
                shard.unlink()

    def read(self) -> list[dict]:
        """Every episode already written (all ranks' shards, so a run may change its world size)."""
        if not self.path.exists():
            return []
        if self.path.is_dir() and not any(self.path.glob("*.parquet")):
            return []
        return read_episodes(self.path)

    def has_own_shards(self) -> bool:
        """Whether this rank (or a single-process run) already wrote here; other ranks may be writing."""
        if self.single_file:
            return self.path.exists()
        prefix = "shard-" if self.world == 1 else self._shard_prefix()
        return self.path.is_dir() and any(self.path.glob(prefix + "*.parquet"))

    def shards(self) -> dict[int, Path]:
        """This rank's shards by number."""
        prefix = self._shard_prefix()
        return {
            int(p.stem[len(prefix) :]): p
            for p in self.path.glob(prefix + "*.parquet")
            if p.stem[len(prefix) :].isdigit()
        }

    def append(self, episodes: list[dict], number: int | None = None) -> None:
        """Write ``episodes`` as this rank's next shard (or as shard ``number``: online self-play numbers
        them by training step)."""
        if not episodes:
            return
        schema = episode_schema()
        if self.single_file:  # spag's episodes (or new): rewritten whole each time
            self._kept.extend(episodes)
            write_table_atomic(self.path, self._kept, schema=schema)
            return
        prefix = self._shard_prefix()
        if (
            number is not None
        ):  # a step's shard, numbered by the caller (a resumed run dropped the later ones)
            write_table_atomic(self.path / f"{prefix}{number:05d}.parquet", episodes, schema=schema, new=True)
            return
        number = max(self.shards(), default=-1) + 1
        while True:  # a new shard never replaces one: a name taken meanwhile is passed over
            try:
                write_table_atomic(
                    self.path / f"{prefix}{number:05d}.parquet", episodes, schema=schema, new=True
                )
                return
            except OutputExists:
                number += 1

    def keep(self, episodes: list[dict]) -> None:
        """Episodes already in a single-file output, kept when it is rewritten."""
        self._kept = list(episodes)


def to_original_format(episode: Mapping) -> dict:
    """The original project's episode shape: target word, max turns, and the bare history."""
    return {
        "target_word": episode["target_word"],
        "max_turns": int(episode["max_turns"]),
        "history": [{"role": u["role"], "content": u["content"]} for u in episode["history"]],
    }


def export_json(episodes: Sequence[Mapping], path: str | os.PathLike) -> None:
    """Episodes as the original project's results file: a JSON list of :func:`to_original_format`."""
    write_json_atomic(path, [to_original_format(e) for e in episodes])
