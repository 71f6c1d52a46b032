"""Every file the tool writes, it reads back identically, whatever the text: property tests (hypothesis)
over the JSON, JSON-lines and Parquet round trips of episodes and training rows.

Model output can hold any character: line and paragraph separators (U+2028, U+2029), NEL (U+0085),
NUL, other control characters, astral characters, and very long strings.
"""

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spag.game.episodes import EpisodeStore, read_episodes, write_episodes
from spag.rewards.rows import read_rows, row_schema
from spag.runtime.atomic import write_json_atomic, write_jsonl_atomic, write_table_atomic
from spag.runtime.records import read_records
from spag.testing import run_cli

# Characters that have broken line-oriented readers: str.splitlines() splits at every one of them.
AWKWARD = [
    "\u2028",
    "\u2029",
    "\x85",
    "\x00",
    "\n",
    "\r",
    "\r\n",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1d",
    "\x1e",
    "\ufeff",
    "\U0001f600",
    "\U0001d518",
    "\\",
    '"',
    "\ud7ff",
    "\U0010ffff",
]

text = st.lists(
    st.one_of(st.sampled_from(AWKWARD), st.text(st.characters(exclude_categories=("Cs",)), max_size=20)),
    max_size=8,
).map("".join)
word = text.filter(lambda s: s.strip() != "")
# A target word is refused with a control character in it (a BOM or NUL from a word list): any other text.
target_word = st.text(
    st.characters(exclude_categories=("Cs", "Cc", "Cf", "Co", "Cn")), min_size=1, max_size=20
).filter(lambda s: s.strip() != "")


@st.composite
def episodes(draw):
    contents = draw(st.lists(text, max_size=6))
    history = [{"role": ("attacker", "defender")[i % 2], "content": c} for i, c in enumerate(contents)]
    return {"target_word": draw(target_word), "max_turns": draw(st.integers(1, 10)), "history": history}


rows = st.fixed_dictionaries(
    {
        "prompt": word,
        "completion": word,
        "reward": st.floats(-10, 10),
        "weight": st.floats(0.01, 10),
        "role": st.sampled_from(["attacker", "defender"]),
        "kind": st.just("game"),
        "target_word": word,
        "turn": st.integers(0, 20),
        "episode": text,
        "history_bounds": st.none() | st.just([]),
    }
)

PROPERTY = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@PROPERTY
@given(st.lists(episodes(), min_size=1, max_size=4), st.sampled_from([".json", ".jsonl", ".parquet"]))
def test_episodes_read_back_identically(tmp_path, batch, suffix):
    path = tmp_path / f"episodes{suffix}"
    write_episodes(batch, path)  # the examples share tmp_path: spag's own file
    assert read_episodes(path) == batch


@PROPERTY
@given(st.lists(episodes(), min_size=1, max_size=4))
def test_play_shards_read_back_identically(tmp_path, batch):
    played = [
        {**e, "history": [{**u, "n_tokens": 3, "truncated": False} for u in e["history"]], "word_index": i}
        for i, e in enumerate(batch)
    ]
    folder = Path(tempfile.mkdtemp(dir=tmp_path)) / "shards"  # a new folder for every example
    EpisodeStore(folder).append(played)
    back = EpisodeStore(folder).read()
    assert [{k: e[k] for k in ("target_word", "max_turns", "history", "word_index")} for e in back] == played


@PROPERTY
@given(st.lists(rows, min_size=1, max_size=4), st.sampled_from([".jsonl", ".parquet"]))
def test_training_rows_read_back_identically(tmp_path, batch, suffix):
    path = tmp_path / f"rows{suffix}"
    write_table_atomic(path, batch, schema=row_schema() if suffix == ".parquet" else None)
    assert read_records(path) == batch
    # what training takes from each row is the row's own text, unchanged
    assert [(r["prompt"], r["completion"], r["reward"]) for r in read_rows(path)] == [
        (r["prompt"], r["completion"], r["reward"]) for r in batch
    ]


@PROPERTY
@given(st.dictionaries(word, text, max_size=5))
def test_json_and_jsonl_records_read_back_identically(tmp_path, record):
    write_jsonl_atomic(tmp_path / "r.jsonl", [record, record])
    assert read_records(tmp_path / "r.jsonl") == [record, record]
    write_json_atomic(tmp_path / "r.json", [record])
    assert read_records(tmp_path / "r.json") == [record]


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet"])
def test_megabyte_utterances_read_back_identically(tmp_path, suffix):
    long = ("".join(AWKWARD) + " a word ") * (1_000_000 // 30)
    assert len(long.encode("utf-8")) > 1_000_000
    batch = [
        {
            "target_word": "river\u2028",
            "max_turns": 5,
            "history": [{"role": "attacker", "content": long}, {"role": "defender", "content": long[::-1]}],
        }
    ]
    write_episodes(batch, tmp_path / f"e{suffix}")
    assert read_episodes(tmp_path / f"e{suffix}") == batch


def test_judge_reads_back_its_own_output_with_line_separators(tmp_path):
    """Issue 11: `spag judge` wrote a file that `spag judge` then refused ("record 0: not valid JSON")."""
    games = [
        {
            "target_word": "apple",
            "max_turns": 5,
            "history": [
                {"role": "attacker", "content": f"a fruit{sep}that is red"},
                {"role": "defender", "content": f"I know the word! It is apple{sep}"},
            ],
        }
        for sep in ("\u2028", "\u2029", "\x85")
    ]
    source = tmp_path / "games.jsonl"
    write_jsonl_atomic(source, games)
    first = run_cli("judge", source, "-o", tmp_path / "once.jsonl")
    assert first.code == 0, first.stderr
    second = run_cli("judge", tmp_path / "once.jsonl", "-o", tmp_path / "twice.jsonl")
    assert second.code == 0, second.stderr
    once, twice = read_records(tmp_path / "once.jsonl"), read_records(tmp_path / "twice.jsonl")
    assert once == twice and [g["history"] for g in once] == [g["history"] for g in games]
