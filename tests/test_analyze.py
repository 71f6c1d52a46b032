"""`spag analyze`: named queries over synthetic episodes with known answers, raw SQL, formats, errors."""

import csv
import io
import json
import math
import re

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from spag.analyze import named_queries, run_query
from spag.analyze.views import file_labels, zipf_frequencies
from spag.cli import app
from spag.game.episodes import judged, write_episodes
from spag.game.taboo import Taboo
from spag.runtime.errors import AnalyzeError

TABOO = Taboo()


def a(text):
    return {"role": "attacker", "content": text}


def d(text):
    return {"role": "defender", "content": text}


def attacker_win(word, long=False):
    history = [a("Tell me about your day."), d(f"I played the {word} all morning.")]
    if long:
        history = [
            a("Tell me about your day."),
            d("It was quiet."),
            a("What did you do for fun?"),
            d(f"I played the {word} all morning."),
        ]
    return {"target_word": word, "max_turns": 5, "history": history}


def defender_win(word):
    return {
        "target_word": word,
        "max_turns": 5,
        "history": [a("Something you might play or use."), d(f"I know the word! It is {word}")],
    }


def tie(word):
    return {"target_word": word, "max_turns": 1, "history": [a("Hello there."), d("Hi, nice weather.")]}


def foul(word):
    return {"target_word": word, "max_turns": 5, "history": [a(f"My {word} is broken.")]}


# Word frequency (wordfreq Zipf): water 5.5 (very common), piano 4.3 (common), zeppelin 3.3 (uncommon),
# quokka 1.5 (rare).
EPOCH_1 = [
    attacker_win("water"),
    attacker_win("water", long=True),
    attacker_win("piano", long=True),
    defender_win("piano"),
    tie("zeppelin"),
    foul("quokka"),
]
EPOCH_2 = [attacker_win("water"), attacker_win("quokka"), defender_win("water"), defender_win("piano")]
TEACHER = [defender_win("zeppelin"), foul("water")]  # written without outcome: the view asks the judge


def wilson(x, n, z=1.959963984540054):
    p = x / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyze")
    write_episodes(judged(EPOCH_1, TABOO), root / "data" / "epoch_1" / "episodes" / "shard-0.parquet")
    write_episodes(judged(EPOCH_2[:2], TABOO), root / "data" / "epoch_2" / "episodes" / "shard-0.parquet")
    write_episodes(judged(EPOCH_2[2:], TABOO), root / "data" / "epoch_2" / "episodes" / "shard-1.parquet")
    write_episodes(TEACHER, root / "data" / "teacher" / "episodes" / "gpt4.parquet")
    assert "outcome" not in pq.read_schema(root / "data" / "teacher" / "episodes" / "gpt4.parquet").names
    return root


@pytest.fixture(scope="module")
def glob(data):
    return str(data / "data" / "**" / "episodes" / "*.parquet")


def invoke(*args):
    return CliRunner().invoke(app, ["analyze", *map(str, args)])


def by(rows, *keys):
    return {(tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]): r for r in rows}


def test_file_labels():
    assert file_labels("data/epoch_12/episodes/shard-0.parquet") == (12, "epoch_12")
    assert file_labels("data/teacher/episodes/gpt4.parquet") == (None, "teacher")
    assert file_labels("/tmp/results/eps.parquet") == (None, "results")


def test_win_rate_per_epoch_and_role(glob):
    rows = by(run_query("win_rate", glob), "run", "role")
    assert set(rows) == {
        (run, role) for run in ("teacher", "epoch_1", "epoch_2") for role in ("attacker", "defender")
    }
    expected = {
        ("epoch_1", "attacker"): (6, 3),
        ("epoch_1", "defender"): (6, 1),
        ("epoch_2", "attacker"): (4, 2),
        ("epoch_2", "defender"): (4, 2),
        ("teacher", "attacker"): (2, 0),
        ("teacher", "defender"): (2, 1),
    }
    for key, (games, wins) in expected.items():
        row = rows[key]
        assert (row["games"], row["wins"]) == (games, wins)
        assert row["win_rate"] == pytest.approx(wins / games)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson(wins, games))
    assert rows[("epoch_1", "attacker")]["epoch"] == 1 and rows[("teacher", "attacker")]["epoch"] is None
    # Ordered by epoch, teacher (no epoch) first.
    assert [r["run"] for r in run_query("win_rate", glob)][::2] == ["teacher", "epoch_1", "epoch_2"]


def test_outcomes_judged_for_files_without_them(glob):
    rows = run_query(
        "SELECT target_word, outcome, turns FROM episodes WHERE run = 'teacher' ORDER BY 1", glob
    )
    assert rows == [
        {"target_word": "water", "outcome": "attacker_breaks_rules", "turns": 1},
        {"target_word": "zeppelin", "outcome": "defender_wins", "turns": 2},
    ]


def test_foul_rate(glob):
    rows = by(run_query("foul_rate", glob), "run")
    assert (rows["epoch_1"]["games"], rows["epoch_1"]["fouls"]) == (6, 1)
    assert rows["epoch_1"]["foul_rate"] == pytest.approx(1 / 6)
    assert (rows["epoch_1"]["ci_low"], rows["epoch_1"]["ci_high"]) == pytest.approx(wilson(1, 6))
    assert rows["epoch_2"]["fouls"] == 0 and rows["epoch_2"]["foul_rate"] == 0.0
    assert rows["epoch_2"]["mean_foul_turn"] is None
    assert rows["teacher"]["foul_rate"] == pytest.approx(0.5) and rows["teacher"]["mean_foul_turn"] == 1.0


def test_game_length(glob):
    rows = by(run_query("game_length", glob), "run", "turns")
    # epoch_1: a foul at 1; attacker win, defender win, tie at 2; two attacker wins at 4.
    assert {k[1]: r["games"] for k, r in rows.items() if k[0] == "epoch_1"} == {1: 1, 2: 3, 4: 2}
    assert rows[("epoch_1", 2)]["share"] == pytest.approx(0.5)
    assert rows[("epoch_1", 2)]["cumulative_share"] == pytest.approx(4 / 6)
    assert rows[("epoch_1", 4)]["cumulative_share"] == pytest.approx(1.0)
    assert (
        rows[("epoch_1", 2)]["opener_wins"],  # the attacker opens
        rows[("epoch_1", 2)]["responder_wins"],
        rows[("epoch_1", 2)]["ties"],
        rows[("epoch_1", 2)]["fouls"],
    ) == (1, 1, 1, 0)
    assert {k[1]: r["games"] for k, r in rows.items() if k[0] == "epoch_2"} == {2: 4}


def test_by_frequency(glob):
    rows = by(run_query("by_frequency", glob), "run", "band")
    e1 = {k[1]: r for k, r in rows.items() if k[0] == "epoch_1"}
    assert list(e1) == ["very common (zipf >= 5)", "common (4-5)", "uncommon (3-4)", "rare (< 3)"]
    assert (
        e1["very common (zipf >= 5)"]["games"] == 2
        and e1["very common (zipf >= 5)"]["attacker_win_rate"] == 1.0
    )
    assert e1["common (4-5)"]["attacker_win_rate"] == 0.5 and e1["common (4-5)"]["defender_win_rate"] == 0.5
    assert e1["uncommon (3-4)"]["tie_rate"] == 1.0
    assert e1["rare (< 3)"]["foul_rate"] == 1.0
    e2 = {k[1]: r for k, r in rows.items() if k[0] == "epoch_2"}
    assert e2["very common (zipf >= 5)"]["games"] == 2 and e2["very common (zipf >= 5)"]["words"] == 1
    for row in rows.values():
        total = row["attacker_win_rate"] + row["defender_win_rate"] + row["tie_rate"] + row["foul_rate"]
        assert total == pytest.approx(1.0)


def test_hardest_and_easiest_words(glob):
    # Over all runs: water 5 games (3 attacker wins), piano 3 (1), zeppelin 2 (0), quokka 2 (1).
    hardest = run_query("hardest_words", glob, {"min_games": 2})
    assert [(r["target_word"], r["games"], r["attacker_wins"]) for r in hardest] == [
        ("zeppelin", 2, 0),
        ("piano", 3, 1),
        ("quokka", 2, 1),
        ("water", 5, 3),
    ]
    easiest = run_query("easiest_words", glob, {"min_games": 3, "limit": 1})
    assert [(r["target_word"], r["attacker_win_rate"]) for r in easiest] == [("water", pytest.approx(3 / 5))]
    only_epoch_2 = run_query("hardest_words", glob, {"min_games": 1, "epoch": 2})
    assert [(r["target_word"], r["games"]) for r in only_epoch_2] == [
        ("piano", 1),
        ("water", 2),
        ("quokka", 1),
    ]


def test_every_named_query_runs(glob):
    assert set(named_queries()) == {
        "win_rate",
        "foul_rate",
        "game_length",
        "by_frequency",
        "hardest_words",
        "easiest_words",
        "rules_diff",
        "selfplay",
    }
    for name, query in named_queries().items():
        assert query.description, name
        # rules_diff lists disagreements of the two judges, which this fixture's games do not have
        assert run_query(name, glob) or name == "rules_diff", name


def test_raw_sql_and_sql_file(glob, tmp_path):
    result = invoke(
        glob, "--sql", "SELECT run, count(*) AS n FROM episodes GROUP BY run ORDER BY run", "--format", "csv"
    )
    assert result.exit_code == 0, result.output
    assert list(csv.reader(io.StringIO(result.stdout))) == [
        ["run", "n"],
        ["epoch_1", "6"],
        ["epoch_2", "4"],
        ["teacher", "2"],
    ]
    query = tmp_path / "sources.sql"
    query.write_text(
        "-- files per run\nSELECT count(DISTINCT source_file) AS files FROM episodes WHERE epoch = 2\n"
    )
    result = invoke(glob, "--sql", query, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"files": 2}]
    assert "[spag analyze] sources.sql: 1 rows from 4 episode files" in result.stderr


def test_formats(glob):
    table = invoke(glob, "--query", "foul_rate")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "run",
        "epoch",
        "games",
        "fouls",
        "foul_rate",
        "ci_low",
        "ci_high",
        "mean_foul_turn",
    ]
    assert len(lines) == 2 + 3 and "0.1667" in table.stdout
    as_json = json.loads(invoke(glob, "-q", "foul_rate", "-f", "json").stdout)
    as_csv = list(csv.DictReader(io.StringIO(invoke(glob, "-q", "foul_rate", "-f", "csv").stdout)))
    assert [r["run"] for r in as_json] == [r["run"] for r in as_csv] == ["teacher", "epoch_1", "epoch_2"]
    assert float(as_csv[1]["foul_rate"]) == pytest.approx(as_json[1]["foul_rate"]) == pytest.approx(1 / 6)
    assert as_json[0]["epoch"] is None and as_csv[0]["epoch"] == ""


def test_default_query_and_list(glob):
    result = invoke(glob)
    assert result.exit_code == 0 and result.stdout.splitlines()[0].split()[:3] == ["run", "epoch", "role"]
    listing = invoke("--list")
    assert listing.exit_code == 0
    assert [line.split()[0] for line in listing.stdout.splitlines()] == sorted(named_queries())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sql", "SELEC outcome FROM episodes"], "query sql failed: Parser Error"),
        (["--sql", "SELECT no_such_column FROM episodes"], "query sql failed: Binder Error"),
        (["--query", "win_rates"], "unknown query 'win_rates'"),
        (["--query", "win_rate", "--param", "limit=3"], "has no parameter(s) limit"),
        (["--sql", "missing.sql"], "no such SQL file"),
        (["--query", "win_rate", "--format", "xml"], "unknown --format"),
        (["--query", "win_rate", "-p", "x=1", "-p", "x=2"], "--param x is given twice"),
    ],
)
def test_bad_queries_fail_with_one_line(glob, args, message):
    result = invoke(glob, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_empty_glob_is_a_clear_error(tmp_path):
    result = invoke(tmp_path / "nothing" / "*.parquet")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: no episode files match")
    with pytest.raises(AnalyzeError, match="no episode files match"):
        run_query("win_rate", str(tmp_path / "*.parquet"))


def test_folder_argument(data):
    rows = run_query("SELECT count(*) AS n FROM episodes", str(data / "data" / "epoch_2"))
    assert rows == [{"n": 4}]
    # Only files without stored outcomes: every outcome comes from the judge.
    rows = run_query(
        "SELECT outcome, turns, epoch, run FROM episodes ORDER BY turns", str(data / "data" / "teacher")
    )
    assert rows == [
        {"outcome": "attacker_breaks_rules", "turns": 1, "epoch": None, "run": "teacher"},
        {"outcome": "defender_wins", "turns": 2, "epoch": None, "run": "teacher"},
    ]


def test_zipf_frequencies_agree_with_wordfreq():
    from wordfreq import top_n_list, zipf_frequency

    words = top_n_list("en", 3000)[::3] + [
        "zeppelin",
        "quokka",
        "Water",
        "ice cream",
        "don't",
        "café",
        "x2",
        "zzzqqxw",
        "harpsichord",
    ]
    assert zipf_frequencies(words) == [zipf_frequency(w, "en") for w in words]


def test_selfplay_statistics_per_epoch(glob):
    rows = by(run_query("selfplay", glob), "run")
    one, two = rows["epoch_1"], rows["epoch_2"]
    assert (one["games"], two["games"]) == (6, 4)
    assert one["decisive_rate"] == pytest.approx(4 / 6) and one["foul_rate"] == pytest.approx(1 / 6)
    wins = by(run_query("win_rate", glob), "run", "role")  # each role's: the roles are the game's
    assert (wins[("epoch_1", "attacker")]["win_rate"], wins[("epoch_1", "defender")]["win_rate"]) == (
        pytest.approx(3 / 6),
        pytest.approx(1 / 6),
    )
    assert two["decisive_rate"] == 1.0 and two["foul_rate"] == 0.0
    assert (one["foul_rate_low"], one["foul_rate_high"]) == pytest.approx(wilson(1, 6))
    # Files without spag play's token counts: the lengths they cannot tell are NULL, not zero.
    assert one["mean_reply_tokens"] is None and one["truncated_share"] is None
    assert one["mean_turns"] == pytest.approx(sum(judged([e], TABOO)[0]["turns"] for e in EPOCH_1) / 6)


def test_a_query_reads_the_episodes_and_nothing_else(tmp_path):
    """spag analyze --sql runs a file from anywhere: it may not read, write, attach or install."""
    import duckdb

    from spag.analyze import run_query
    from spag.analyze.views import connect
    from spag.game.episodes import write_episodes
    from spag.runtime.errors import AnalyzeError

    folder = tmp_path / "episodes"
    folder.mkdir()
    write_episodes(
        [
            {
                "target_word": "apple",
                "max_turns": 1,
                "outcome": "tie",
                "turns": 1,
                "history": [{"role": "attacker", "content": "a fruit"}],
            }
        ],
        folder / "shard.parquet",
    )
    secret = tmp_path / "secret.txt"
    secret.write_text("password\n")
    with connect(str(folder)) as con:
        assert con.execute("SELECT count(*) FROM episodes").fetchone()[0] == 1
        for sql in (
            f"SELECT * FROM read_csv('{secret}')",
            f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'",
            f"ATTACH '{tmp_path / 'db.duckdb'}'",
            "INSTALL httpfs",
            "SET enable_external_access = true",
        ):
            with pytest.raises(duckdb.Error):
                con.execute(sql)
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "db.duckdb").exists()
    # The episode files are readable, and spag analyze runs SELECT statements only: none can be rewritten.
    shard = folder / "shard.parquet"
    before = shard.read_bytes()
    with pytest.raises(AnalyzeError, match="only SELECT"):
        run_query(f"COPY (SELECT 1 AS x) TO '{shard}' (FORMAT parquet)", str(folder))
    assert shard.read_bytes() == before
    assert run_query("SELECT count(*) AS n FROM episodes", str(folder)) == [{"n": 1}]


@pytest.mark.parametrize(
    "statement, message",
    [
        ("SELECT * FROM read_csv('{secret}')", "file system operations are disabled"),
        (
            "SELECT count(*) FROM episodes WHERE target_word IN (SELECT * FROM read_text('{secret}'))",
            "file system operations are disabled",
        ),
        ("COPY (SELECT * FROM episodes) TO '{written}'", "only SELECT statements"),
        ("ATTACH '{written}' AS other", "only SELECT statements"),
        ("INSTALL httpfs", "only SELECT statements"),
        ("LOAD httpfs", "only SELECT statements"),
    ],
)
def test_a_sql_file_from_elsewhere_reads_no_other_file_and_writes_nothing(glob, tmp_path, statement, message):
    """spag analyze --sql FILE: one line and exit 2 for a query that reaches beyond the episodes."""
    secret, written = tmp_path / "secret.txt", tmp_path / "written.out"
    secret.write_text("password\n")
    query = tmp_path / "query.sql"
    query.write_text(statement.format(secret=secret, written=written) + "\n")
    result = invoke(glob, "--sql", query)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: query query.sql") and message in lines[0], lines
    assert "password" not in result.output and not written.exists()


@pytest.mark.parametrize(
    "columns, named",
    [
        ({"target_word": [1], "history": [["a"]]}, "column target_word is int64, expected text"),
        (
            {"target_word": ["a"], "history": [1]},
            "column history is int64, expected a list of {role, content}",
        ),
        ({"target_word": ["a"], "history": ["[]"], "outcome": [1], "turns": [1]}, "column outcome is int64"),
    ],
)
def test_a_file_of_another_shape_is_named_with_its_column(tmp_path, columns, named):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spag.analyze import run_query
    from spag.runtime.errors import AnalyzeError

    path = tmp_path / "other.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(AnalyzeError, match=rf"{path}: not an episode file \({re.escape(named)}"):
        run_query("win_rate", str(path))


def test_a_query_for_another_game_and_rules_it_has_not_are_refused_in_one_line(tmp_path):
    """H3 and M2 (fourth attack): Adversarial Taboo's by_frequency on Kuhn poker episodes reported a band and
    rates of 0.0 with exit 0; --rules original (and rules_diff) printed `Invalid Input Error:` and nothing after.
    A game's own query reads that game's episodes only, --list says which game each is for, and --rules is
    refused for a game without rule sets; the queries of every game run on Kuhn poker's."""
    from spag.game.kuhn import KuhnPoker

    kuhn = KuhnPoker()
    hands = [
        {
            "target_word": "K-Q",
            "max_turns": 2,
            "history": [{"role": "first", "content": "[bet]"}, {"role": "second", "content": "[fold]"}],
            **kuhn.record(),
        }
    ]
    path = tmp_path / "data" / "epoch_1" / "episodes" / "shard-0.parquet"
    write_episodes(judged(hands, kuhn), path)
    for args, message in [
        (
            ["-q", "by_frequency"],
            "error: query by_frequency is for Adversarial Taboo episodes (taboo); these are kuhn-poker's",
        ),
        (["-q", "rules_diff"], "error: query rules_diff is for Adversarial Taboo episodes"),
        (
            ["-q", "win_rate", "--rules", "original"],
            "error: --rules: judges Adversarial Taboo "
            "episodes again by its rule sets; these "
            "episodes are also kuhn-poker's",
        ),
    ]:
        result = invoke(path, *args)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith(message), (args, lines)
    rows = run_query("win_rate", str(path))
    assert {(r["role"], r["wins"]) for r in rows} == {("first", 1), ("second", 0)}
    listing = {line.split()[0]: line.split()[1] for line in invoke("--list").stdout.splitlines()}
    assert listing["by_frequency"] == "taboo" and listing["win_rate"] == "any"


@pytest.mark.parametrize("kind", ["folder", "fifo", "latin-1"])
def test_a_sql_path_that_is_no_sql_file_is_named(glob, tmp_path, kind):
    import os

    path = tmp_path / f"q-{kind}.sql"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes("SELECT 'café'".encode("latin-1"))
    result = invoke(glob, "--sql", path)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and str(path) in lines[0]
    assert ("not UTF-8" if kind == "latin-1" else "not a regular file") in lines[0]
