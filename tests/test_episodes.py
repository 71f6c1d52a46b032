"""Episodes: validation and round trips through JSON, JSONL and Parquet."""

import json

import pyarrow.parquet as pq
import pytest

from spag.game.episodes import judged, read_episodes, validate_episode, write_episodes
from spag.io import DataError

EPISODES = [
    {
        "target_word": "apple",
        "max_turns": 5,
        "history": [
            {"role": "attacker", "content": "A red fruit?"},
            {"role": "defender", "content": "I know the word! It is apple"},
        ],
        "id": "game-1",
        "temperature": 1.2,
    },
    {"target_word": "river", "max_turns": 2, "history": [{"role": "attacker", "content": "Water flows…"}]},
]


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet"])
def test_round_trip_keeps_every_field(tmp_path, suffix):
    path = tmp_path / f"episodes{suffix}"
    write_episodes(EPISODES, path)
    back = read_episodes(path)
    assert [e["target_word"] for e in back] == ["apple", "river"]
    assert back[0]["history"] == EPISODES[0]["history"]
    assert back[0]["id"] == "game-1" and back[0]["temperature"] == 1.2
    assert back[1]["history"][0]["content"] == "Water flows…"


def test_parquet_history_is_a_list_of_structs(tmp_path):
    path = tmp_path / "e.parquet"
    write_episodes(EPISODES, path)
    field = pq.read_schema(path).field("history")
    assert str(field.type) == "list<element: struct<role: string, content: string>>"


def test_directory_of_shards_is_read_in_order(tmp_path):
    write_episodes(EPISODES[:1], tmp_path / "shard-00000.parquet")
    write_episodes(EPISODES[1:], tmp_path / "shard-00001.parquet")
    assert [e["target_word"] for e in read_episodes(tmp_path)] == ["apple", "river"]


def test_original_results_file_without_max_turns_defaults_to_five(tmp_path):
    path = tmp_path / "gpt4.json"
    path.write_text(json.dumps([{"target_word": "apple", "history": []}]))
    assert read_episodes(path)[0]["max_turns"] == 5


@pytest.mark.parametrize(
    "record, message",
    [
        ({"max_turns": 5, "history": []}, "target_word"),
        ({"target_word": "", "history": []}, "target_word"),
        ({"target_word": "apple"}, "history"),
        ({"target_word": "apple", "history": [{"role": "judge", "content": "x"}]}, "unknown role"),
        ({"target_word": "apple", "history": [{"role": "attacker", "content": 3}]}, "not a string"),
        ({"target_word": "apple", "max_turns": "many", "history": []}, "max_turns"),
    ],
)
def test_bad_records_name_the_file_and_record(tmp_path, record, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(EPISODES[1]) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(DataError, match=message) as info:
        read_episodes(path)
    assert "bad.jsonl: record 1" in str(info.value)
    assert "\n" not in str(info.value)


def test_malformed_json_is_reported(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"target_word": "apple", ')
    with pytest.raises(DataError, match="broken.json.*not valid JSON"):
        read_episodes(path)


def test_judged_adds_outcome_and_turns():
    out = judged([validate_episode(e, i) for i, e in enumerate(EPISODES)])
    assert (out[0]["outcome"], out[0]["turns"]) == ("defender_wins", 2)
    assert (out[1]["outcome"], out[1]["turns"]) == ("tie", 1)
    assert out[0]["id"] == "game-1"
