"""SQL over episodes: named queries (``queries/*.sql``) and raw SQL against the ``episodes`` view.

``run_query("win_rate", "data/**/episodes/*.parquet")`` returns a list of dicts; the view, its columns
and the helper macros are described in :mod:`spag.analyze.views`.

A named query is a ``.sql`` file whose first comment line is its one-line description. A comment line
``-- params: name=default, ...`` declares DuckDB parameters (``$name`` in the SQL) and their defaults.
The queries of ``queries/`` hold for every game; a game adds its own from its package
(:attr:`spag.game.base.Game.queries`: Adversarial Taboo's word-frequency bands and rule-set comparison).

A sibling of :mod:`spag.evaluate` (neither imports the other); reads episode files only, and may import
the layers below (game for the episode record and its games, runtime).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spag.analyze.views import DEFAULT_GLOB, connect
from spag.game.registry import GAMES
from spag.runtime.console import first_line
from spag.runtime.errors import AnalyzeError
from spag.runtime.signals import Interrupted, Terminated

QUERY_DIR = Path(__file__).with_name("queries")
_NAME = re.compile(r"^\w+$")
_NAME_START = re.compile(r"[A-Za-z_]\w*")
_COMMENT = re.compile(r"--[^\n]*")
_USES_WORDS = re.compile(r"\b(?:from|join)\s+words\b", re.IGNORECASE)

__all__ = [
    "DEFAULT_GLOB",
    "AnalyzeError",
    "NamedQuery",
    "QueryResult",
    "execute",
    "named_queries",
    "parse_value",
    "run_query",
]


@dataclass(frozen=True)
class NamedQuery:
    name: str
    description: str
    sql: str
    params: dict = field(default_factory=dict)
    game: str | None = None  # the one game whose episodes it reads (a game's own query), None: every game's


@dataclass
class QueryResult:
    label: str
    columns: list[str]
    rows: list[tuple]
    files: int
    seconds: float

    def records(self) -> list[dict]:
        return [dict(zip(self.columns, row)) for row in self.rows]


def parse_value(text: str) -> Any:
    """A parameter value from the command line: null, an int, a float, or the text itself."""
    if text.lower() in ("null", "none"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _read_named(path: Path, game: str | None = None) -> NamedQuery:
    sql = path.read_text(encoding="utf-8")
    comments = [line[2:].strip() for line in sql.splitlines() if line.startswith("--")]
    description = next((c for c in comments if c), "")
    params = {}
    for comment in comments:
        if comment.startswith("params:"):
            for item in comment[len("params:") :].split(","):
                name, _, value = item.strip().partition("=")
                params[name.strip()] = parse_value(value.strip())
    return NamedQuery(path.stem, description, sql, params, game)


def named_queries() -> dict[str, NamedQuery]:
    """Every named query: those of every game, and of the games' own folders (each for its game alone)."""
    folders = [
        (QUERY_DIR, None),
        *((game.queries, name) for name, game in GAMES.items() if game.queries is not None),
    ]
    found = {p.stem: (p, game) for folder, game in folders for p in folder.glob("*.sql")}
    return {name: _read_named(*found[name]) for name in sorted(found)}


def _resolve(name_or_sql: str) -> tuple[str, str, dict, str | None]:
    """(label, SQL, default params, the game it is for) for a query name, a ``.sql`` file path, or SQL text."""
    text = name_or_sql.strip()
    queries = named_queries()
    if text in queries:
        query = queries[text]
        return query.name, query.sql, dict(query.params), query.game
    if text.endswith(".sql") and "\n" not in text:
        path = Path(text)
        if not path.exists():
            raise AnalyzeError(f"no such SQL file: {text}")
        if not path.is_file():
            raise AnalyzeError(f"{text}: not a regular file (give a .sql file)")
        try:
            return path.name, path.read_text(encoding="utf-8"), {}, None
        except UnicodeDecodeError:
            raise AnalyzeError(f"{text}: not UTF-8 text") from None
    if _NAME.match(text):
        raise AnalyzeError(f"unknown query {text!r}; named queries: {', '.join(queries)}")
    if not text:
        raise AnalyzeError("empty SQL")
    return "sql", text, {}, None


def _check_game(con, label: str, game: str | None) -> None:
    """A game's own query reads that game's episodes only: any other game's is refused, naming both."""
    if game is None:
        return
    others = [name for (name,) in con.execute("SELECT game FROM spag_games").fetchall() if name != game]
    if others:
        raise AnalyzeError(
            f"query {label} is for {GAMES[game].title} episodes ({game}); these are "
            f"{', '.join(others)}'s (spag analyze --list says which game each query is for)"
        )


DEFAULT_TIME_LIMIT = (
    300.0  # seconds a query may run: seconds on a million episodes, so minutes means a mistake
)


def parameters(sql: str) -> set[str]:
    """The named parameters (``$name``) of ``sql``, found by DuckDB's own tokenizer: a ``$word`` inside a
    string, a quoted name or a comment is text, not a parameter."""
    import duckdb

    tokens = duckdb.tokenize(sql)
    names = set()
    for (position, kind), after in itertools.pairwise(tokens):
        if (
            kind == duckdb.token_type.operator
            and sql[position] == "$"
            and after[0] == position + 1
            and after[1] in (duckdb.token_type.identifier, duckdb.token_type.keyword)
        ):  # $limit, $name
            name = _NAME_START.match(sql, position + 1)
            if name:
                names.add(name.group())
    return names


def execute(
    name_or_sql: str,
    glob: str = DEFAULT_GLOB,
    params: Mapping[str, Any] | None = None,
    rules: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> QueryResult:
    """Run a named query, a ``.sql`` file or SQL text over the episodes ``glob`` names.

    ``rules`` (whole-word or original) judges every episode again by those rules first. The query is
    stopped after ``time_limit`` seconds (AnalyzeError), and at once on Ctrl-C or SIGTERM (the exception
    that brought them, saying the query was stopped).
    """
    import duckdb

    start = time.perf_counter()
    label, sql, values, game = _resolve(name_or_sql)
    try:
        wanted = parameters(sql)
    except duckdb.Error as exc:
        raise AnalyzeError(f"query {label} cannot be read: {first_line(exc)}") from None
    unknown = set(params or {}) - wanted
    if unknown:
        raise AnalyzeError(f"query {label} has no parameter(s) {', '.join(sorted(unknown))}")
    values.update(params or {})
    missing = wanted - values.keys()
    if missing:
        raise AnalyzeError(
            f"query {label} needs parameter(s) {', '.join(sorted(missing))} (--param NAME=VALUE)"
        )
    code = _COMMENT.sub("", sql)
    try:
        with connect(glob, words=bool(_USES_WORDS.search(code)), rules=rules) as con:
            try:
                files = con.execute("SELECT count(*) FROM spag_files").fetchone()[0]
                _check_game(con, label, game)
                kinds = {statement.type for statement in con.extract_statements(sql)}
                if kinds - {duckdb.StatementType.SELECT}:
                    raise AnalyzeError(
                        f"query {label}: only SELECT statements run here (no COPY, ATTACH, INSTALL, "
                        "SET, CREATE ...): spag analyze reads episodes and writes nothing"
                    )
                columns, rows = _run(
                    con, sql, {k: v for k, v in values.items() if k in wanted} or None, label, time_limit
                )
            except duckdb.Error as exc:
                raise AnalyzeError(f"query {label} failed: {first_line(exc)}") from None
    except duckdb.Error as exc:
        raise AnalyzeError(f"cannot read episodes {glob!r}: {first_line(exc)}") from None
    except (KeyboardInterrupt, Interrupted, Terminated) as stop:  # while the views were being set up
        raise type(stop)(str(stop) or "the query was stopped") from None
    return QueryResult(label, columns, rows, files, time.perf_counter() - start)


def _run(con, sql: str, values: dict | None, label: str, time_limit: float) -> tuple[list[str], list[tuple]]:
    """The query's columns and rows. It runs in a thread of its own, so that this one stays free to stop it
    (``con.interrupt()``): when ``time_limit`` passes, or on Ctrl-C or SIGTERM, which DuckDB's C code would
    otherwise not see until the query ends, minutes or hours later. (The end is awaited on an Event, not
    ``Thread.join``: a join that a signal interrupts marks the thread as ended while it still runs.)"""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def query() -> None:
        try:
            cursor = con.execute(sql, values)
            outcome["columns"] = None if cursor.description is None else [d[0] for d in cursor.description]
            outcome["rows"] = cursor.fetchall() if cursor.description is not None else []
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=query, name=f"spag-analyze-{label}", daemon=True).start()
    try:
        finished = done.wait(time_limit)
    except (KeyboardInterrupt, Interrupted, Terminated) as stop:  # Ctrl-C, SIGTERM: stop it, then say so
        _stop(con, done)
        raise type(stop)("the query was stopped") from None
    except BaseException:
        _stop(con, done)
        raise
    if not finished:
        _stop(con, done)
        raise AnalyzeError(
            f"query {label} stopped after {time_limit:g} s, its time limit (--time-limit SECONDS)"
        )
    if "error" in outcome:
        raise outcome["error"]
    if outcome["columns"] is None:
        raise AnalyzeError(f"query {label} returned no result set")
    return outcome["columns"], outcome["rows"]


def _stop(con, done: threading.Event) -> None:
    """Interrupt the running query and wait until it has ended (a second signal meanwhile is let pass)."""
    con.interrupt()
    while not done.is_set():
        with contextlib.suppress(KeyboardInterrupt, Interrupted, Terminated):
            done.wait()


def run_query(
    name_or_sql: str,
    glob: str = DEFAULT_GLOB,
    params: Mapping[str, Any] | None = None,
    rules: str | None = None,
) -> list[dict]:
    """The rows of a named query (``win_rate``, ...), a ``.sql`` file or SQL text, as dicts."""
    return execute(name_or_sql, glob, params, rules).records()
