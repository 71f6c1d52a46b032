"""SQL over episodes: named queries (``queries/*.sql``) and raw SQL against the ``episodes`` view.

``run_query("win_rate", "data/**/episodes/*.parquet")`` returns a list of dicts; the view, its columns
and the helper macros are described in :mod:`spag.analyze.views`.

A named query is a ``.sql`` file whose first comment line is its one-line description. A comment line
``-- params: name=default, ...`` declares DuckDB parameters (``$name`` in the SQL) and their defaults.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spag.analyze.views import DEFAULT_GLOB, AnalyzeError, connect
from spag.console import first_line

QUERY_DIR = Path(__file__).with_name("queries")
_NAME = re.compile(r"^\w+$")
_PARAM = re.compile(r"\$([A-Za-z_]\w*)")
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


def _read_named(path: Path) -> NamedQuery:
    sql = path.read_text(encoding="utf-8")
    comments = [line[2:].strip() for line in sql.splitlines() if line.startswith("--")]
    description = next((c for c in comments if c), "")
    params = {}
    for comment in comments:
        if comment.startswith("params:"):
            for item in comment[len("params:") :].split(","):
                name, _, value = item.strip().partition("=")
                params[name.strip()] = parse_value(value.strip())
    return NamedQuery(path.stem, description, sql, params)


def named_queries() -> dict[str, NamedQuery]:
    return {p.stem: _read_named(p) for p in sorted(QUERY_DIR.glob("*.sql"))}


def _resolve(name_or_sql: str) -> tuple[str, str, dict]:
    """(label, SQL, default params) for a query name, a ``.sql`` file path, or SQL text."""
    text = name_or_sql.strip()
    queries = named_queries()
    if text in queries:
        query = queries[text]
        return query.name, query.sql, dict(query.params)
    if text.endswith(".sql") and "\n" not in text:
        path = Path(text)
        if not path.is_file():
            raise AnalyzeError(f"no such SQL file: {text}")
        return path.name, path.read_text(encoding="utf-8"), {}
    if _NAME.match(text):
        raise AnalyzeError(f"unknown query {text!r}; named queries: {', '.join(queries)}")
    if not text:
        raise AnalyzeError("empty SQL")
    return "sql", text, {}


def execute(
    name_or_sql: str, glob: str = DEFAULT_GLOB, params: Mapping[str, Any] | None = None,
    rules: str | None = None,
) -> QueryResult:
    """Run a named query, a ``.sql`` file or SQL text over the episodes ``glob`` names.

    ``rules`` (whole-word or original) judges every episode again by those rules first.
    """
    import duckdb

    start = time.perf_counter()
    label, sql, values = _resolve(name_or_sql)
    code = _COMMENT.sub("", sql)
    wanted = set(_PARAM.findall(code))
    unknown = set(params or {}) - wanted
    if unknown:
        raise AnalyzeError(f"query {label} has no parameter(s) {', '.join(sorted(unknown))}")
    values.update(params or {})
    missing = wanted - values.keys()
    if missing:
        raise AnalyzeError(
            f"query {label} needs parameter(s) {', '.join(sorted(missing))} (--param NAME=VALUE)"
        )
    try:
        con = connect(glob, words=bool(_USES_WORDS.search(code)), rules=rules)
    except duckdb.Error as exc:
        raise AnalyzeError(f"cannot read episodes {glob!r}: {first_line(exc)}") from None
    try:
        files = con.execute("SELECT count(*) FROM spag_files").fetchone()[0]
        kinds = {statement.type for statement in con.extract_statements(sql)}
        if kinds - {duckdb.StatementType.SELECT}:
            raise AnalyzeError(f"query {label}: only SELECT statements run here (no COPY, ATTACH, INSTALL, SET, "
                               "CREATE ...): spag analyze reads episodes and writes nothing")
        cursor = con.execute(sql, {k: v for k, v in values.items() if k in wanted} or None)
        if cursor.description is None:
            raise AnalyzeError(f"query {label} returned no result set")
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    except duckdb.Error as exc:
        raise AnalyzeError(f"query {label} failed: {first_line(exc)}") from None
    finally:
        con.close()
    return QueryResult(label, columns, rows, files, time.perf_counter() - start)


def run_query(
    name_or_sql: str, glob: str = DEFAULT_GLOB, params: Mapping[str, Any] | None = None,
    rules: str | None = None,
) -> list[dict]:
    """The rows of a named query (``win_rate``, ...), a ``.sql`` file or SQL text, as dicts."""
    return execute(name_or_sql, glob, params, rules).records()
