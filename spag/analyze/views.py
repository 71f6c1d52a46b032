"""DuckDB over the episode Parquet files of every epoch: one ``episodes`` view, a few macros, word bands.

The ``episodes`` view has every column of the files (Parquet shards read by name, so shards written by
different versions combine) plus:

- ``outcome``, ``turns``: the judged outcome. ``spag play`` judges each episode as it writes it and
  stores both columns; for files (or rows) without them the view asks the game's judge itself through a
  Python UDF (``spag_judge_by``), so no rule is ever re-implemented in SQL. ``spag analyze --rules
  original`` (or ``whole-word``: Adversarial Taboo's rule sets) judges every episode again by those rules.
  Episodes the judge cannot read (an unknown role, say) get a NULL outcome: ``WHERE outcome IS NULL`` finds
  them.
- ``winner``, ``offender``: the role that won, and the role that broke the rules (NULL for none), as the
  episode's game names them for its outcome (:attr:`spag.game.base.Game.outcome_sides`): queries count
  wins and fouls from these, never from a game's outcome names.
- ``attacker_model``, ``defender_model``: NULL where a file does not have them.
- ``source_file``: the Parquet file the episode came from.
- ``epoch``: the number in the last ``epoch_<n>`` component of the file's path (``data/epoch_2/...`` -> 2);
  NULL for episodes outside an epoch (the teacher's, for instance).
- ``run``: the folder that holds the ``episodes`` folder (``data/teacher/episodes/x.parquet`` ->
  ``teacher``, ``data/epoch_2/episodes/...`` -> ``epoch_2``), else the file's own folder.

A ``roles`` table (``game, seat, role``) lists the roles of every registered game, the opening role at
seat 0. The UDF ``spag_judge_by(game, settings, target_word, history_json, max_turns)`` judges by a game's
judge with ``settings`` (a JSON object) over its defaults.

Macros: ``rate(x, n)`` (x / n, NULL when n = 0) and ``wilson_low(x, n)`` / ``wilson_high(x, n)``, the
95% Wilson score interval of a proportion x / n.

A ``words`` table (``target_word, zipf, band, band_order``) is built on demand, for the distinct target
words only, from wordfreq's Zipf frequency: per-row Python calls would be far too slow on a million
episodes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePath

from spag.game.registry import DEFAULT_GAME, GAMES, game_class
from spag.runtime.errors import AnalyzeError

DEFAULT_GLOB = "data/**/episodes/*.parquet"

# Zipf frequency = log10(occurrences per billion words); 7 is "the", 3 about once per million words.
FREQUENCY_BANDS = (
    (5.0, "very common (zipf >= 5)"),
    (4.0, "common (4-5)"),
    (3.0, "uncommon (3-4)"),
    (-math.inf, "rare (< 3)"),
)

_Z = 1.959963984540054  # the 97.5% normal quantile: a two-sided 95% interval

_MACROS = f"""
CREATE OR REPLACE TEMP MACRO rate(x, n) AS x::DOUBLE / NULLIF(n, 0);
CREATE OR REPLACE TEMP MACRO wilson_low(x, n) AS CASE WHEN n > 0 THEN
    ((x::DOUBLE / n + {_Z}^2 / (2 * n))
     - {_Z} * sqrt((x::DOUBLE / n) * (1 - x::DOUBLE / n) / n + {_Z}^2 / (4 * n * n)))
    / (1 + {_Z}^2 / n) END;
CREATE OR REPLACE TEMP MACRO wilson_high(x, n) AS CASE WHEN n > 0 THEN
    ((x::DOUBLE / n + {_Z}^2 / (2 * n))
     + {_Z} * sqrt((x::DOUBLE / n) * (1 - x::DOUBLE / n) / n + {_Z}^2 / (4 * n * n)))
    / (1 + {_Z}^2 / n) END;
"""

# Needs the episodes view, so it is created after it.
_EPISODE_MACROS = """
-- Outcome counts and win rates per target, over all epochs or one: the opening role's wins (seat 0) and
-- the other's (seat 1), ties (nobody won or fouled) and fouls (the word queries share it).
CREATE OR REPLACE TEMP MACRO word_outcomes(only_epoch) AS TABLE
    SELECT
        target_word,
        count(*) AS games,
        count(*) FILTER (WHERE winner_seat = 0) AS opener_wins,
        count(*) FILTER (WHERE winner_seat = 1) AS responder_wins,
        count(*) FILTER (WHERE winner IS NULL AND offender IS NULL) AS ties,
        count(*) FILTER (WHERE offender IS NOT NULL) AS fouls,
        rate(count(*) FILTER (WHERE winner_seat = 0), count(*)) AS opener_win_rate,
        rate(count(*) FILTER (WHERE winner_seat = 1), count(*)) AS responder_win_rate
    FROM episodes
    WHERE only_epoch IS NULL OR epoch = only_epoch
    GROUP BY target_word;
"""

_EPOCH = re.compile(r"epoch_(\d+)")


def file_labels(path: str) -> tuple[int | None, str]:
    """(epoch, run) of an episode file, from its path; see the module docstring."""
    epochs = _EPOCH.findall(str(path).replace("\\", "/"))
    epoch = int(epochs[-1]) if epochs else None
    parent = PurePath(path).parent
    run = parent.parent.name if parent.name == "episodes" and parent.parent.name else parent.name
    return epoch, run


def find_files(con, glob: str) -> list[str]:
    """The Parquet files a glob (or a folder, searched recursively, or one file) names."""
    pattern = f"{glob.rstrip('/')}/**/*.parquet" if Path(glob).is_dir() else glob
    files = [row[0] for row in con.execute("SELECT file FROM glob(?) ORDER BY file", [pattern]).fetchall()]
    files = [f for f in files if f.endswith(".parquet")]
    if not files:
        raise AnalyzeError(f"no episode files match {glob!r} (expected Parquet files, e.g. {DEFAULT_GLOB!r})")
    return files


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@functools.lru_cache(maxsize=256)
def _judge(game: str, settings_json: str, max_turns: int):
    """``game``'s judge with the settings of ``settings_json`` over its defaults (one per kind of episode)."""
    cls = game_class(game or DEFAULT_GAME)
    settings = cls.Settings.model_validate(
        {**json.loads(settings_json or "{}"), "max_turns": max_turns, "name": cls.name}
    )
    return cls(settings).judge


def _verdict(game, settings_json, target_word, history_json, max_turns) -> dict | None:
    """One episode's verdict; None where an argument is NULL or does not make an episode."""
    if None in (game, settings_json, target_word, history_json, max_turns):
        return None  # what DuckDB gives a scalar function's NULL argument
    try:
        history = json.loads(history_json)
        if isinstance(history, str):  # a history column that already held JSON text, encoded once more
            history = json.loads(history)
        verdict = _judge(game, settings_json, int(max_turns))(target_word, history)
    except (ValueError, KeyError, TypeError):
        return None
    return {"outcome": verdict.outcome, "turns": verdict.turns}


def _judge_udf(game, settings_json, target_word, history_json, max_turns):
    """``spag_judge_by`` over a vector of episodes (Arrow arrays in and out)."""
    import pyarrow as pa

    columns = (game, settings_json, target_word, history_json, max_turns)
    verdicts = [_verdict(*row) for row in zip(*(column.to_pylist() for column in columns))]
    return pa.array(verdicts, type=pa.struct([("outcome", pa.string()), ("turns", pa.int32())]))


def _register_judge(con) -> None:
    """``spag_judge_by`` on ``con``: :func:`_judge_udf`, a vector of episodes at a time."""
    import duckdb

    con.create_function(
        "spag_judge_by",
        _judge_udf,
        [duckdb.sqltype(t) for t in ("VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "INTEGER")],
        duckdb.sqltype("STRUCT(outcome VARCHAR, turns INTEGER)"),
        type="arrow",
    )


def _sides_sql(column: str, side: int) -> str:
    """A CASE over the outcome naming its winner (``side`` 0) or offender (1), from every game's table."""
    cases = [
        f"WHEN {_sql_string(outcome)} THEN {_sql_string(sides[side])}"
        for game in GAMES.values()
        for outcome, sides in game.outcome_sides.items()
        if sides[side]
    ]
    return f"CASE {column} {' '.join(cases)} END" if cases else "NULL::VARCHAR"


def _file_columns(files: list[str]) -> list[set[str]]:
    """Each file's column names; AnalyzeError naming the file when it cannot be read or a column an episode
    has is of another type (a number as target word, text as outcome count ...)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def text(t) -> bool:
        return pa.types.is_string(t) or pa.types.is_large_string(t)

    def utterances(t) -> bool:  # the history: JSON text, or a list of {role, content, ...}
        if text(t):
            return True
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
            return False
        fields = {
            t.value_type.field(i).name: t.value_type.field(i).type for i in range(t.value_type.num_fields)
        }
        return all(name in fields and text(fields[name]) for name in ("role", "content"))

    expected = {
        "target_word": (text, "text"),
        "outcome": (text, "text"),
        "history": (utterances, "a list of {role, content} or JSON text"),
        "turns": (pa.types.is_integer, "an integer"),
        "max_turns": (pa.types.is_integer, "an integer"),
    }
    columns = []
    for file in files:
        try:
            schema = pq.read_schema(file)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a broken file
            raise AnalyzeError(f"{file}: not a readable Parquet file ({exc.__class__.__name__}: {exc})")
        for name, (fits, what) in expected.items():
            if name in schema.names and not fits(schema.field(name).type):
                raise AnalyzeError(
                    f"{file}: not an episode file (column {name} is {schema.field(name).type}, "
                    f"expected {what})"
                )
        columns.append(set(schema.names))
    return columns


# Columns an older episode file may lack: NULL of their type where a file has none.
OPTIONAL_COLUMNS = (
    ("outcome", "VARCHAR"),
    ("turns", "BIGINT"),
    ("attacker_model", "VARCHAR"),
    ("defender_model", "VARCHAR"),
    ("generated_tokens", "BIGINT"),
    ("truncated_replies", "BIGINT"),
    ("game", "VARCHAR"),
    ("game_settings", "VARCHAR"),
)


def _with_optional_columns(raw: str, types: dict) -> str:
    """``SELECT`` over ``raw`` with every optional column there, NULL where no file has it."""
    fill = "".join(f", NULL::{kind} AS {name}" for name, kind in OPTIONAL_COLUMNS if name not in types)
    return f"SELECT *{fill} FROM {raw}"


def register_episodes(con, glob: str = DEFAULT_GLOB, rules: str | None = None) -> list[str]:
    """Create the ``episodes`` view (and ``spag_files``) on ``con``; returns the files it reads.

    With ``rules`` (whole-word or original) every episode is judged again by those rules, whatever
    outcome its file stores. The UDF ``spag_judge_by(game, settings, target_word, history_json, max_turns)`` is
    always there, for queries that compare rule sets (``rules_diff``).
    """
    files = find_files(con, glob)
    per_file = _file_columns(files)
    _register_judge(con)
    needs_judge = [
        f for f, cols in zip(files, per_file) if rules is not None or not {"outcome", "turns"} <= cols
    ]
    for file, cols in zip(files, per_file):
        missing = {"target_word", "history"} - cols if file in needs_judge else {"target_word"} - cols
        if missing:
            raise AnalyzeError(f"{file}: not an episode file (no {', '.join(sorted(missing))} column)")

    file_list = "[" + ", ".join(_sql_string(f) for f in files) + "]"
    raw = f"read_parquet({file_list}, union_by_name = true, filename = 'source_file')"
    types = dict(
        con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {raw})").fetchall()
    )

    base = _with_optional_columns(raw, types)
    games = sorted(
        name
        for (name,) in con.execute(
            f"SELECT DISTINCT coalesce(game, {_sql_string(DEFAULT_GAME)}) FROM ({base})"
        ).fetchall()
    )
    con.execute("CREATE OR REPLACE TEMP TABLE spag_games AS SELECT unnest(?::VARCHAR[]) AS game", [games])
    judged_again = [
        name for name in games if name not in GAMES or "rules" not in GAMES[name].Settings.model_fields
    ]
    if rules is not None and judged_again:
        raise AnalyzeError(
            f"--rules: judges Adversarial Taboo episodes again by its rule sets; these episodes are "
            f"also {', '.join(judged_again)}'s, which has no rule sets"
        )

    if needs_judge:
        history = "history" if types.get("history") == "VARCHAR" else "to_json(history)::VARCHAR"
        max_turns = "coalesce(max_turns, 5)::INTEGER" if "max_turns" in types else "5"
        again = "TRUE" if rules is not None else "outcome IS NULL OR turns IS NULL"
        settings = "coalesce(game_settings, '{}')"
        if rules is not None:  # Adversarial Taboo's rule sets, over what each episode recorded
            settings = f"json_merge_patch({settings}, {_sql_string(json.dumps({'rules': rules}))})::VARCHAR"
        base = f"""
            SELECT * EXCLUDE (_verdict) REPLACE (
                {"_verdict.outcome" if rules else "coalesce(outcome, _verdict.outcome)"} AS outcome,
                {"_verdict.turns" if rules else "coalesce(turns, _verdict.turns)"} AS turns)
            FROM (SELECT *, CASE WHEN {again}
                              THEN spag_judge_by(coalesce(game, {_sql_string(DEFAULT_GAME)}), {settings},
                                                 target_word, {history}, {max_turns})
                              END AS _verdict
                  FROM ({base}))"""
    base = f"""
        SELECT *, {_sides_sql("outcome", 0)} AS winner, {_sides_sql("outcome", 1)} AS offender FROM ({base})"""

    con.execute("CREATE OR REPLACE TEMP TABLE spag_files (source_file VARCHAR, epoch INTEGER, run VARCHAR)")
    con.executemany("INSERT INTO spag_files VALUES (?, ?, ?)", [(f, *file_labels(f)) for f in files])
    con.execute("CREATE OR REPLACE TEMP TABLE roles (game VARCHAR, seat INTEGER, role VARCHAR)")
    con.executemany(
        "INSERT INTO roles VALUES (?, ?, ?)",
        [(name, seat, role) for name, game in GAMES.items() for seat, role in enumerate(game.roles)],
    )
    con.execute(f"""
        CREATE OR REPLACE TEMP VIEW episodes AS
        SELECT e.*, f.epoch, f.run, r.seat AS winner_seat
        FROM ({base}) e JOIN spag_files f USING (source_file)
        LEFT JOIN roles r ON r.game = coalesce(e.game, {_sql_string(DEFAULT_GAME)}) AND r.role = e.winner""")
    return files


def frequency_band(zipf: float) -> tuple[str, int]:
    """(band name, band order) of a Zipf frequency; order 0 is the most common band."""
    for order, (lower, name) in enumerate(FREQUENCY_BANDS):
        if zipf >= lower:
            return name, order
    raise AssertionError("the last band has no lower bound")


_PLAIN_WORD = re.compile(r"^[a-z]+$")


def zipf_frequencies(words: list[str]) -> list[float]:
    """wordfreq's ``zipf_frequency(word, "en")`` of each word, fast enough for 50k distinct words.

    For a plain lower-case word, zipf_frequency tokenises it to itself and reads wordfreq's frequency
    table; we read that table directly and skip the tokeniser (a test checks the two agree). Any other
    word goes through zipf_frequency itself.
    """
    from wordfreq import freq_to_zipf, get_frequency_dict, zipf_frequency

    table = get_frequency_dict("en")
    out = []
    for word in words:
        if _PLAIN_WORD.match(word):
            freq = table.get(word)
            out.append(round(freq_to_zipf(freq), 2) if freq else 0.0)
        else:
            out.append(zipf_frequency(word, "en"))
    return out


def register_words(con) -> int:
    """Create the ``words`` table for the distinct target words in ``episodes``; returns its size."""
    import pyarrow as pa

    words = [
        row[0]
        for row in con.execute(
            "SELECT DISTINCT target_word FROM episodes WHERE target_word IS NOT NULL"
        ).fetchall()
    ]
    zipf = zipf_frequencies(words)
    bands = [frequency_band(z) for z in zipf]
    table = pa.table(
        {
            "target_word": pa.array(words, pa.string()),
            "zipf": pa.array(zipf, pa.float64()),
            "band": pa.array([b[0] for b in bands], pa.string()),
            "band_order": pa.array([b[1] for b in bands], pa.int32()),
        }
    )
    con.register("_spag_words", table)
    con.execute("CREATE OR REPLACE TEMP TABLE words AS SELECT * FROM _spag_words")
    con.unregister("_spag_words")
    return len(words)


# Once the views are set up, a query may read the episode files and no other file, and may not install or
# load extensions or change a setting (spag.analyze also runs only SELECT statements: no COPY, no ATTACH).
_LOCK_DOWN = (
    "SET enable_external_access = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET lock_configuration = true",
)


@contextlib.contextmanager
def connect(glob: str = DEFAULT_GLOB, words: bool = False, rules: str | None = None) -> Iterator:
    """An in-memory DuckDB connection with the ``episodes`` view and the macros (and ``words``), closed
    when the block ends.

    ``rules``: judge every episode again by these rules instead of reading its stored outcome. Then
    the connection is locked down: the episode files are the only files it can reach (``_LOCK_DOWN``).
    DuckDB always lets a query read its temporary folder (``.tmp`` of the working directory by default,
    where anyone's files may be): it gets a new private one of its own, removed afterwards.
    """
    import duckdb

    private = tempfile.mkdtemp(prefix="spag-analyze-")  # mode 0700: this user's alone
    con = duckdb.connect()
    try:
        con.execute("SET temp_directory = ?", [private])
        con.execute(_MACROS)
        files = register_episodes(con, glob, rules)
        con.execute(_EPISODE_MACROS)
        if words:
            register_words(con)
        con.execute("SET allowed_paths = ?", [files])
        for setting in _LOCK_DOWN:
            con.execute(setting)
        yield con
    finally:
        con.close()
        shutil.rmtree(private, ignore_errors=True)
