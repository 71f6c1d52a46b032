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
from spag.runtime.atomic import (
    Replace,
    check_output_file,
    write_json_atomic,
    write_jsonl_atomic,
    write_table_atomic,
)
from spag.runtime.errors import DataError, OutputExists, OutputRefused
from spag.runtime.folders import claim_output_dir, clear_output_dir, mark_output_dir, output_kind
from spag.runtime.manifest import read_manifest
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


def write_episodes(episodes: list[Mapping], path: str | os.PathLike, *, replace: Replace = "no") -> None:
    """Write episodes atomically: Parquet for ``.parquet``, a JSON list for ``.json``, else JSON lines."""
    path = Path(path)
    if path.suffix == ".json":
        write_json_atomic(path, list(episodes), replace=replace)
    elif path.suffix == ".parquet":
        write_table_atomic(path, list(episodes), replace=replace)
    else:
        write_jsonl_atomic(path, episodes, replace=replace)


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
    write_table_atomic(Path(output_dir) / IMPORTED, kept, replace="any")  # a pipeline stage's output
    return kept, dropped


# ------------------------------------------------------------------------------ a play run on disk

PLAY_KIND = "play"  # the output-folder marker of a play run (spag.runtime.folders)


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


def _what_is_in(path: Path) -> str:
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


def claim_episode_file(path: str | os.PathLike, *, overwrite: bool, resume: bool) -> Path:
    """Check that episodes may be written to the single file ``path``: it is new, or spag's own episodes
    (a Parquet file with spag's episode schema) with ``overwrite`` (replaced) or ``resume`` (continued).
    OutputRefused otherwise (a folder, a device, a FIFO, a read-only file ...: the output rule of
    :func:`spag.runtime.atomic.check_output_file`); changes nothing. Returns the file to write (a symlink followed)."""
    target = check_output_file(path, "the episodes file", replace="any")
    if not target.exists():
        return target
    if not holds_spag_episodes(target):
        raise OutputRefused(
            path,
            f"{_what_is_in(target)} not episodes spag wrote: move it away or choose "
            "another path (--overwrite replaces only spag's own episodes)",
        )
    if not (overwrite or resume):
        raise OutputRefused(
            path,
            "already holds episodes: pass --resume to continue, --overwrite to "
            "replace them, or choose a new output",
        )
    return target


class EpisodeStore:
    """Episodes on disk: a directory of Parquet shards, or one Parquet file rewritten atomically."""

    def __init__(self, output: str | os.PathLike, rank: int = 0, world: int = 1):
        self.path = Path(output)
        self.single_file = self.path.suffix == ".parquet"
        self.rank, self.world = rank, world
        if self.single_file and world > 1:
            raise ValueError("several ranks need a directory output, not one .parquet file")
        self._kept: list[dict] = []

    def _shard_prefix(self) -> str:
        return "shard-" if self.world == 1 else f"shard-r{self.rank}-"

    def check(self, overwrite: bool, resume: bool) -> None:
        """Refuse a file or directory that is not ours to write (:mod:`spag.runtime.atomic`, :mod:`spag.runtime.folders`); changes nothing.
        A symlink is followed: the store writes what it names."""
        if self.single_file:
            self.path = claim_episode_file(self.path, overwrite=overwrite, resume=resume)
        else:
            # Under several ranks the others' shards are expected here: only a foreign folder is refused.
            self.path = claim_output_dir(
                self.path, PLAY_KIND, overwrite=overwrite, resume=resume or self.world > 1
            )

    def lock_part(self) -> str | None:
        """The part of the output this process writes, for its lock (:func:`spag.runtime.locks.writing`): one rank's
        shards when several write into one folder, else the whole output."""
        return f"r{self.rank}" if self.world > 1 else None

    def claim(self, overwrite: bool, resume: bool) -> None:
        """:meth:`check`, then with ``overwrite`` drop our own episodes (this rank's shards, or the file):
        only what spag recorded writing, so a user's notes in the folder stay."""
        self.check(overwrite, resume)
        if overwrite and self.single_file:
            self.path.unlink(missing_ok=True)
        elif overwrite and self.path.is_dir():
            recorded = read_manifest(self.path).get("files") or {}
            others = [name for name in recorded if not name.startswith(self._shard_prefix())]
            clear_output_dir(self.path, keep=others)

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
        if self.single_file:  # claimed as spag's episodes (or new) by check(): rewritten whole each time
            self._kept.extend(episodes)
            write_table_atomic(self.path, self._kept, schema=schema, replace="any")
            return
        if output_kind(self.path) is None:  # marked with its first shard: a failed start leaves nothing
            mark_output_dir(self.path, PLAY_KIND)
        prefix = self._shard_prefix()
        if (
            number is not None
        ):  # a step's shard, numbered by the caller (a resumed run dropped the later ones)
            write_table_atomic(self.path / f"{prefix}{number:05d}.parquet", episodes, schema=schema)
            return
        number = max(self.shards(), default=-1) + 1
        while True:  # a new shard never replaces one: a name taken meanwhile is passed over
            try:
                write_table_atomic(self.path / f"{prefix}{number:05d}.parquet", episodes, schema=schema)
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


def export_json(episodes: Sequence[Mapping], path: str | os.PathLike, *, replace: Replace = "no") -> None:
    """Episodes as the original project's results file: a JSON list of :func:`to_original_format`."""
    write_json_atomic(path, [to_original_format(e) for e in episodes], replace=replace)
