"""``spag analyze``: DuckDB SQL over the episodes of every epoch (named queries or raw SQL)."""

from __future__ import annotations

import csv
import datetime
import decimal
import io
import json
import math
import sys

import typer

from spag.analyze import DEFAULT_GLOB, DEFAULT_TIME_LIMIT, execute, named_queries, parse_value
from spag.game.taboo.rules import RULE_SETS
from spag.runtime.console import error, summary
from spag.runtime.errors import AnalyzeError

FORMATS = ("table", "csv", "json")


def plain(value):
    """A query result's value as JSON has it, for every type DuckDB returns: numbers, text, booleans and
    null as they are (a NaN or infinite number as null); dates and times in ISO 8601; an INTERVAL, a UUID,
    a BIT string and anything else as its text; a BLOB in hex; a LIST, ARRAY, STRUCT or MAP as a list or
    an object (a key that is no text becomes its text)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)  # INTERVAL (timedelta), UUID, and whatever a newer DuckDB adds


def text(value) -> str:
    """A value as a CSV or table cell: empty for null, a nested value as its JSON, else as :func:`plain`
    gives it (a float as it is: nan and inf stay visible)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    shown = plain(value)
    if isinstance(shown, (dict, list)):
        return json.dumps(shown, ensure_ascii=False)
    return "" if shown is None else str(shown)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return text(value)


def format_table(columns: list[str], rows: list[tuple]) -> str:
    """A plain aligned text table: numbers right-aligned, floats to 4 decimals."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) and bool(rows)
        for i in range(len(columns))
    ]

    def line(values):
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
        ).rstrip()

    out = [line(columns), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out) + "\n"


def format_rows(columns: list[str], rows: list[tuple], fmt: str) -> str:
    if fmt == "table":
        return format_table(columns, rows)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[text(v) for v in row] for row in rows])
        return buffer.getvalue()

    return (
        json.dumps(
            [{c: plain(v) for c, v in zip(columns, row)} for row in rows], ensure_ascii=False, indent=1
        )
        + "\n"
    )


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    def analyze_command(
        episodes: str | None = typer.Argument(
            None,
            help="Episode Parquet files: a glob (quote it), a folder, or a file. "
            "Default: data/**/episodes/*.parquet",
        ),
        query: str | None = typer.Option(None, "--query", "-q", help="A named query (see --list)."),
        sql: str | None = typer.Option(None, "--sql", help="SQL over the `episodes` view, or a .sql file."),
        fmt: str = typer.Option("table", "--format", "-f", help="Output: table, csv or json."),
        param: list[str] = typer.Option(
            [], "--param", "-p", help="A query parameter, NAME=VALUE (repeatable)."
        ),
        list_queries: bool = typer.Option(False, "--list", help="List the named queries and exit."),
        rules: str | None = typer.Option(
            None,
            "--rules",
            help="Judge every episode again by these rules (whole-word or original) instead of reading "
            "its stored outcome.",
        ),
        time_limit: float = typer.Option(
            DEFAULT_TIME_LIMIT,
            "--time-limit",
            min=0.001,
            help="Seconds a query may run before it is stopped (Ctrl-C stops it at once).",
        ),
    ) -> None:
        """SQL over the judged episodes of every epoch; prints the result (default: the win_rate query).

        The `episodes` view has the files' columns plus outcome, turns, epoch, run and source_file;
        macros rate(x, n), wilson_low(x, n), wilson_high(x, n); a `words` table (zipf, band) on demand.
        """
        if list_queries:
            for query_def in named_queries().values():
                defaults = ", ".join(f"{k}={'null' if v is None else v}" for k, v in query_def.params.items())
                sys.stdout.write(
                    f"{query_def.name:<14} {query_def.game or 'any game':<10} {query_def.description}"
                    + (f" [params: {defaults}]" if defaults else "")
                    + "\n"
                )
            return
        if query and sql:
            error("give either --query or --sql, not both")
            raise typer.Exit(2)

        if rules is not None and rules not in RULE_SETS:
            error(f"unknown --rules {rules!r} ({' or '.join(RULE_SETS)})")
            raise typer.Exit(2)
        if fmt not in FORMATS:
            error(f"unknown --format {fmt!r} (table, csv or json)")
            raise typer.Exit(2)
        params = {}
        for item in param:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                error(f"--param expects NAME=VALUE, got {item!r}")
                raise typer.Exit(2)
            if name.strip() in params:  # the last one would win unseen
                error(f"--param {name.strip()} is given twice (the second time as {item!r})")
                raise typer.Exit(2)
            params[name.strip()] = parse_value(value.strip())

        glob = episodes or DEFAULT_GLOB
        try:
            result = execute(sql or query or "win_rate", glob, params, rules, time_limit=time_limit)
        except AnalyzeError as exc:
            error(str(exc))
            raise typer.Exit(2)
        sys.stdout.write(format_rows(result.columns, result.rows, fmt))
        summary(
            "analyze",
            f"{result.label}: {len(result.rows)} rows from {result.files} episode files "
            f"({glob}) in {result.seconds:.2f} s",
        )
