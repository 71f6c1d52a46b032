"""Episodes: validation and round trips through JSON, JSONL and Parquet."""

import json

import pyarrow.parquet as pq
import pytest

from spag.game.episodes import judged, read_episodes, validate_episode, write_episodes
from spag.game.taboo import Taboo
from spag.runtime.errors import DataError

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
    out = judged([validate_episode(e, i) for i, e in enumerate(EPISODES)], Taboo())
    assert (out[0]["outcome"], out[0]["turns"]) == ("defender_wins", 2)
    assert (out[1]["outcome"], out[1]["turns"]) == ("tie", 1)
    assert out[0]["id"] == "game-1"


def test_a_played_episode_has_exactly_the_fields_of_its_one_definition(tmp_path):
    from spag.game.episodes import EPISODE_FIELDS, SETTINGS_CHECKED_ON_RESUME, episode_schema
    from spag.play.engine import PlayConfig, play_games
    from spag.players import Reply

    class Chatty:
        name = "chatty"

        def generate(self, prompts, **_):
            return [Reply("Hello there.", 2) for _ in prompts]

    names = [name for name, _, _ in EPISODE_FIELDS]
    (episode,) = play_games(
        Chatty(),
        Chatty(),
        ["apple"],
        PlayConfig.of(max_turns=1, end="guess-phrase"),
        output=tmp_path / "episodes",
        show_progress=False,
    )
    assert set(episode) == set(names) and episode_schema().names == names
    assert json.loads(episode["game_settings"])["end"] == "guess-phrase" and episode["max_turns"] == 1
    assert episode["game"] == "taboo" and json.loads(episode["strategies"])["foul_retries"] == 0
    assert {"game", "game_settings", "strategies", "empty_retries", "attacker_fingerprint"} <= set(
        SETTINGS_CHECKED_ON_RESUME
    )
    assert not {"outcome", "history", "generated_tokens"} & set(SETTINGS_CHECKED_ON_RESUME)
    # a resume under another game end would pass off these games as its own: refused, naming the setting
    with pytest.raises(DataError, match="was played with game_settings=.*guess-phrase"):
        play_games(
            Chatty(),
            Chatty(),
            ["apple"],
            PlayConfig.of(max_turns=1),
            output=tmp_path / "episodes",
            resume=True,
            show_progress=False,
        )
