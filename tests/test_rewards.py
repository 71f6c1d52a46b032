"""Rewards and training sets: hand-computed rewards and weights, prompts, bad input, SFT mixing, outputs."""

import json
from fractions import Fraction

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from spag.cli import app
from spag.config import Reward
from spag.game.taboo.rules import says_word
from spag.rewards.build import (
    build_imitation_set,
    build_reward_set,
    decayed_shares,
    imitation_rows,
    reward_rows,
    role_weights,
    utterance_rewards,
)
from spag.rewards.rows import ROW_COLUMNS
from spag.rewards.sft import load_sft
from spag.runtime.errors import DataError


def a(text):
    return {"role": "attacker", "content": text}


def d(text):
    return {"role": "defender", "content": text}


# The attacker wins on its third move: the defender says "pianos" (a form of the target word).
ATTACKER_WIN_3 = {
    "id": "g-attacker",
    "target_word": "piano",
    "max_turns": 5,
    "history": [
        a("  Let's talk about music you can play at home.  \n"),
        d("I like the guitar and singing along."),
        a("Think bigger, something with black and white keys."),
        d("An organ in a church?"),
        a("Smaller than that, found in many living rooms and concert halls."),
        d("Oh, those upright pianos are lovely."),
    ],
}
# The defender guesses right on its second move.
DEFENDER_WIN_2 = {
    "target_word": "bread",
    "max_turns": 5,
    "history": [
        a("What do you have for breakfast?"),
        d("Usually some eggs and coffee."),
        a("Anything baked with the eggs, maybe toasted?"),
        d("I know the word! It is bread."),
        a("this utterance comes after the end and must be ignored"),
    ],
}
# The attacker wins on its first move: the defender guesses wrong.
ATTACKER_WIN_1 = {
    "target_word": "river",
    "max_turns": 5,
    "history": [a("Where does a fish swim on its way to the sea?"), d("I know the word! It is ocean")],
}
TIE = {
    "target_word": "castle",
    "max_turns": 1,
    "history": [a("Tell me about old buildings."), d("Some are tall.")],
}
FOUL = {"target_word": "apple", "max_turns": 5, "history": [a("An apple a day keeps the doctor away.")]}


def all_equal(values, expected):
    return len(values) > 0 and values == pytest.approx([expected] * len(values))


def rows_of(rows, role):
    return [r for r in rows if r["role"] == role]


# ---------------------------------------------------------------------------------------------- maths


@given(
    moves=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(["attacker", "defender"])), min_size=1, max_size=30
    ),
    decay=st.floats(0.05, 1.0),
)
def test_the_polars_shares_are_utterance_rewards_in_every_game_and_role(moves, decay):
    """decayed_shares over a frame of several games and roles gives each (game, role) the shares
    utterance_rewards gives its n moves, in turn order."""
    frame = pl.DataFrame(
        {"game": [g for g, _ in moves], "role": [r for _, r in moves], "turn": list(range(len(moves)))}
    )
    shares = frame.with_columns(share=decayed_shares(decay))
    for (game, role), group in shares.group_by("game", "role"):
        expected = utterance_rewards(group.height, decay)
        assert group.sort("turn")["share"].to_list() == pytest.approx(expected, rel=1e-12)


def test_utterance_rewards_hand_computed():
    # (5/4)^k for k = 1, 2, 3 is proportional to 80, 100, 125, i.e. 16, 20, 25 (sum 61).
    assert utterance_rewards(3, 0.8) == pytest.approx([16 / 61, 20 / 61, 25 / 61])
    assert utterance_rewards(2, 0.8) == pytest.approx([4 / 9, 5 / 9])
    # decay 0.5: 2, 4, 8 -> 1/7, 2/7, 4/7; decay 1: uniform.
    assert utterance_rewards(3, 0.5) == pytest.approx([1 / 7, 2 / 7, 4 / 7])
    assert utterance_rewards(4, 1.0) == pytest.approx([0.25] * 4)
    assert utterance_rewards(1, 0.3) == [1.0]
    assert utterance_rewards(0, 0.8) == []
    with pytest.raises(ValueError):
        utterance_rewards(2, 0.0)


def test_role_weight_formula():
    assert role_weights(2, 1) == (pytest.approx(3 / 4), pytest.approx(3 / 2))
    assert role_weights(1, 3) == (pytest.approx(2.0), pytest.approx(2 / 3))
    assert role_weights(4, 0) == (pytest.approx(0.5), 0.0)
    assert role_weights(0, 0) == (0.0, 0.0)


def test_rewards_and_weights_on_mixed_games():
    episodes = [ATTACKER_WIN_3, DEFENDER_WIN_2, ATTACKER_WIN_1, TIE, FOUL]
    rows, stats = reward_rows(episodes, seed=1, options=Reward(decay=0.8))
    attacker, defender = rows_of(rows, "attacker"), rows_of(rows, "defender")

    # Game 0: attacker moves at utterances 0, 2, 4 -> 16/61, 20/61, 25/61; game 2: one move -> 1.
    assert [(r["episode"], r["turn"]) for r in attacker] == [
        ("g-attacker", 0),
        ("g-attacker", 2),
        ("g-attacker", 4),
        ("2", 0),
    ]
    assert [r["reward"] for r in attacker] == pytest.approx([16 / 61, 20 / 61, 25 / 61, 1.0])
    # Game 1: defender moves at utterances 1 and 3 (the deciding guess); the utterance after is ignored.
    assert [(r["episode"], r["turn"]) for r in defender] == [("1", 1), ("1", 3)]
    assert [r["reward"] for r in defender] == pytest.approx([4 / 9, 5 / 9])

    # A = 2 attacker-won games, D = 1 defender-won game: weights 3/4 and 3/2.
    assert all_equal([r["weight"] for r in attacker], 0.75)
    assert all_equal([r["weight"] for r in defender], 1.5)
    # Each role carries (A + D) / 2 of weighted reward.
    assert sum(r["reward"] * r["weight"] for r in attacker) == pytest.approx(1.5)
    assert sum(r["reward"] * r["weight"] for r in defender) == pytest.approx(1.5)

    assert stats.used == 3 and stats.no_rows == 2 and stats.bad == 0
    assert stats.outcomes == {"attacker_wins": 2, "defender_wins": 1, "tie": 1, "attacker_breaks_rules": 1}
    assert stats.rows == {"attacker": 4, "defender": 2}
    assert all(r["kind"] == "game" for r in rows)
    assert set(rows[0]) == set(ROW_COLUMNS)


def test_other_decay_values():
    rows, _ = reward_rows([ATTACKER_WIN_3], options=Reward(decay=0.5))
    assert [r["reward"] for r in rows] == pytest.approx([1 / 7, 2 / 7, 4 / 7])
    rows, _ = reward_rows([ATTACKER_WIN_3], options=Reward(decay=1.0))
    assert [r["reward"] for r in rows] == pytest.approx([1 / 3] * 3)
    # Exact fractions for an unusual decay: (1/0.6)^k = (5/3)^k -> 9 : 15 : 25.
    expected = [Fraction(9, 49), Fraction(15, 49), Fraction(25, 49)]
    rows, _ = reward_rows([ATTACKER_WIN_3], options=Reward(decay=0.6))
    assert [r["reward"] for r in rows] == pytest.approx([float(f) for f in expected])


def test_only_one_side_winning():
    rows, stats = reward_rows([ATTACKER_WIN_3, ATTACKER_WIN_1], options=Reward(decay=0.8))
    assert {r["role"] for r in rows} == {"attacker"}
    assert all_equal([r["weight"] for r in rows], 0.5)  # (2 + 0) / (2 * 2)
    assert stats.role_weights["attacker"] == pytest.approx(0.5) and stats.role_weights["defender"] == 0.0

    rows, stats = reward_rows([DEFENDER_WIN_2])
    assert {r["role"] for r in rows} == {"defender"}
    assert all_equal([r["weight"] for r in rows], 0.5)
    assert stats.role_weights["attacker"] == 0.0


def test_fouls_and_ties_yield_nothing():
    rows, stats = reward_rows([TIE, FOUL, TIE])
    assert rows == []
    assert stats.used == 0 and stats.no_rows == 3
    assert stats.role_weights["attacker"] == 0.0 and stats.role_weights["defender"] == 0.0


def test_prompt_holds_the_history_before_only_and_completion_is_stripped():
    rows, _ = reward_rows([ATTACKER_WIN_3, DEFENDER_WIN_2], seed=3)
    history = ATTACKER_WIN_3["history"]
    for row in rows_of(rows, "attacker"):
        turn = row["turn"]
        assert row["completion"] == history[turn]["content"].strip()
        for earlier in history[:turn]:
            assert earlier["content"].strip() in row["prompt"]
        for later in history[turn:]:
            assert later["content"].strip() not in row["prompt"]
        assert "piano" in row["prompt"]  # the attacker is told the target word
    assert rows[0]["completion"] == "Let's talk about music you can play at home."

    for row in rows_of(rows, "defender"):
        later = DEFENDER_WIN_2["history"][row["turn"] :]
        assert all(u["content"] not in row["prompt"] for u in later)
        # The defender is never told the target word, and the history before never says it.
        assert not says_word(row["prompt"], "bread")
        assert "defender" in row["prompt"]


def test_templates_are_seeded():
    first, _ = reward_rows([ATTACKER_WIN_3, DEFENDER_WIN_2], seed=7)
    again, _ = reward_rows([ATTACKER_WIN_3, DEFENDER_WIN_2], seed=7)
    other, _ = reward_rows([ATTACKER_WIN_3, DEFENDER_WIN_2], seed=8)
    assert [r["prompt"] for r in first] == [r["prompt"] for r in again]
    assert [r["prompt"] for r in first] != [r["prompt"] for r in other]


def test_imitation_rows_reward_one_and_role_weights():
    rows, stats = imitation_rows([ATTACKER_WIN_3, DEFENDER_WIN_2, ATTACKER_WIN_1, TIE, FOUL])
    assert {r["reward"] for r in rows} == {1.0}
    assert len(rows_of(rows, "attacker")) == 4 and len(rows_of(rows, "defender")) == 2
    assert all_equal([r["weight"] for r in rows_of(rows, "attacker")], 0.75)
    assert all_equal([r["weight"] for r in rows_of(rows, "defender")], 1.5)
    assert stats.used == 3 and stats.no_rows == 2


# ------------------------------------------------------------------------------------------------ SFT


def test_load_sft_shapes(tmp_path):
    alpaca = tmp_path / "alpaca.json"
    alpaca.write_text(
        json.dumps(
            [
                {"instruction": "Add the numbers.", "input": "2 and 3", "output": " 5 "},
                {"instruction": "Name a colour.", "input": "", "output": "Blue."},
            ]
        )
    )
    rows = load_sft(alpaca)
    assert [(r["prompt"], r["completion"]) for r in rows] == [
        ("Add the numbers.\n\n2 and 3", "5"),
        ("Name a colour.", "Blue."),
    ]
    assert all(
        r["kind"] == "sft" and r["reward"] == 0.0 and r["weight"] == 1.0 and r["role"] is None for r in rows
    )

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"prompt": "Say hi.", "completion": "Hi!"})
        + "\n"
        + json.dumps({"query": "Say bye.", "target": "Bye!"})
        + "\n"
    )
    assert [(r["prompt"], r["completion"]) for r in load_sft(pairs)] == [
        ("Say hi.", "Hi!"),
        ("Say bye.", "Bye!"),
    ]

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"instruction": "No answer", "output": ""}) + "\n" + json.dumps({"x": 1}) + "\n"
    )
    with pytest.raises(DataError, match="record 0"):
        load_sft(bad)
    errors = []
    assert load_sft(bad, errors=errors) == [] and len(errors) == 2


def test_builtin_sft_set_and_limit():
    rows = load_sft("builtin")
    assert 150 <= len(rows) <= 300
    assert len({r["prompt"] for r in rows}) == len(rows)
    sample = load_sft("builtin", limit=10, seed=1)
    assert len(sample) == 10 and all(r in rows for r in sample)
    assert sample == load_sft("builtin", limit=10, seed=1)
    assert sample != load_sft("builtin", limit=10, seed=2)


def test_builtin_sft_file_matches_its_generator():
    # The computed answers (arithmetic, primes, sorting...) are right because the generator computes them.
    from spag.rewards.data.build_general_sft import generate
    from spag.rewards.sft import builtin_sft_path

    shipped = [json.loads(line) for line in builtin_sft_path().read_text().splitlines()]
    assert shipped == generate()


# ------------------------------------------------------------------------------------------ files, CLI


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def invoke(*args):
    return CliRunner().invoke(app, [str(x) for x in args])


def test_build_reward_set_parquet_with_sft(tmp_path):
    episodes = tmp_path / "episodes.parquet"
    pq.write_table(pa.Table.from_pylist([ATTACKER_WIN_3, DEFENDER_WIN_2, TIE]), episodes)
    alpaca = tmp_path / "alpaca.json"
    alpaca.write_text(json.dumps([{"instruction": "Name a colour.", "input": "", "output": "Blue."}]))
    out = tmp_path / "rows.parquet"
    stats = build_reward_set(episodes, out, Reward(sft=str(alpaca), decay=0.8), seed=0)
    table = pq.read_table(out)
    assert table.column_names == list(ROW_COLUMNS)
    assert (
        str(table.schema.field("turn").type) == "int64" and str(table.schema.field("reward").type) == "double"
    )
    rows = table.to_pylist()
    assert [r["kind"] for r in rows] == ["game"] * 5 + ["sft"]
    assert rows[-1]["role"] is None and rows[-1]["turn"] is None and rows[-1]["reward"] == 0.0
    # One attacker-won and one defender-won game: both weights are 1.
    assert {r["weight"] for r in rows} == {1.0}
    assert stats.sft_rows == 1 and stats.records == 3 and stats.used == 2 and stats.no_rows == 1


def test_reward_cli_jsonl_summary_without_sft(tmp_path):
    episodes = tmp_path / "episodes.json"
    episodes.write_text(json.dumps([ATTACKER_WIN_1, DEFENDER_WIN_2, FOUL]))
    out = tmp_path / "rows.jsonl"
    result = invoke("reward", episodes, "-o", out, "--decay", "0.5")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reward"] for r in rows] == pytest.approx([1.0, 1 / 3, 2 / 3])
    summary = result.stderr.strip().splitlines()[-1]
    assert summary.startswith("[spag reward] 3 records: 2 games used, 1 gave no rows")
    assert "attacker 1, defender 2" in summary and "weights: attacker 1, defender 1" in summary
    assert "SFT term has no data" in summary


def test_reward_cli_builtin_sft(tmp_path):
    episodes = write_jsonl(tmp_path / "e.jsonl", [DEFENDER_WIN_2])
    out = tmp_path / "rows.jsonl"
    result = invoke("reward", episodes, "-o", out, "--sft", "builtin", "--sft-limit", "20")
    assert result.exit_code == 0, result.output
    kinds = [json.loads(line)["kind"] for line in out.read_text().splitlines()]
    assert kinds.count("sft") == 20 and kinds.count("game") == 2
    assert "sft: 20 rows from builtin" in result.stderr


BAD = [
    DEFENDER_WIN_2,
    {"target_word": "cat", "max_turns": 5},  # no history
    {"target_word": "cat", "history": [{"role": "referee", "content": "hi"}]},  # unknown role
    {"target_word": "  ", "history": [a("hello")]},  # empty target word
    {"target_word": "dog", "history": []},  # nothing played
    ATTACKER_WIN_1,
]


def test_bad_records_skipped_and_reported(tmp_path):
    episodes = write_jsonl(tmp_path / "e.jsonl", BAD)
    out = tmp_path / "rows.parquet"
    result = invoke("reward", episodes, "-o", out)
    assert result.exit_code == 0, result.output
    lines = result.stderr.strip().splitlines()
    skipped = [line for line in lines if line.startswith("skipped:")]
    assert len(skipped) == 4
    for index, needle in zip((1, 2, 3, 4), ("history", "unknown role", "target_word", "empty 'history'")):
        assert f"record {index}:" in skipped[index - 1] and needle in skipped[index - 1]
    assert lines[-1].startswith("[spag reward] 6 records: 2 games used, 0 gave no rows (tie/foul), 4 skipped")
    rows = pq.read_table(out).to_pylist()
    assert sorted({r["episode"] for r in rows}) == ["0", "5"]  # indices in the source file


def test_bad_records_rejected_under_strict(tmp_path):
    episodes = write_jsonl(tmp_path / "e.jsonl", BAD)
    out = tmp_path / "rows.parquet"
    result = invoke("reward", episodes, "-o", out, "--strict")
    assert result.exit_code == 2
    assert "4 bad record(s)" in result.stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl"]


def test_unreadable_file_is_one_line_exit_2(tmp_path):
    episodes = tmp_path / "e.json"
    episodes.write_text("[{not json")
    result = invoke("reward", episodes, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "e.json" in result.stderr


# ------------------------------------------------------------------------------------- imitation data


def test_imitation_data_from_original_gpt4_episodes(tmp_path):
    # The original results file: a JSON list, max_turns sometimes missing (default 5).
    original = [
        {k: v for k, v in ep.items() if k not in ("max_turns", "id")}
        for ep in (ATTACKER_WIN_3, DEFENDER_WIN_2, FOUL)
    ]
    src = tmp_path / "gpt4_game_top30k_results.json"
    src.write_text(json.dumps(original))
    out = tmp_path / "imitation.parquet"
    result = invoke("imitation-data", src, "-o", out)
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out).to_pylist()
    assert [(r["role"], r["turn"], r["episode"]) for r in rows] == [
        ("attacker", 0, "0"),
        ("attacker", 2, "0"),
        ("attacker", 4, "0"),
        ("defender", 1, "1"),
        ("defender", 3, "1"),
    ]
    assert {r["reward"] for r in rows} == {1.0}
    assert all(" of 5)" in r["prompt"] for r in rows)  # "(round k of 5)": the default max_turns
    assert "[spag imitation-data] 3 records: 2 games used, 1 gave no rows" in result.stderr


def test_imitation_data_from_ready_made_instruction_rows(tmp_path):
    src = tmp_path / "train_imitation_gpt4.json"
    src.write_text(
        json.dumps(
            [
                {
                    "query": "Rules... You are the attacker. The target word is `pear`.",
                    "target": " A green fruit. ",
                },
                {
                    "query": "Rules... Your are the defender. Provide your response.",
                    "target": "Is it a fruit?",
                },
                {
                    "query": "Rules mention the attacker and the defender.",
                    "target": "Hello",
                    "role": "defender",
                },
                {"query": "Rules mention the attacker and the defender.", "target": "Hello"},
                {"query": "", "target": "nothing asked"},
            ]
        )
    )
    out = tmp_path / "imitation.jsonl"
    stats = build_imitation_set(src, out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["role"] for r in rows] == ["attacker", "defender", "defender", None]
    assert rows[0]["completion"] == "A green fruit."
    assert all(r["kind"] == "game" and r["reward"] == 1.0 and r["weight"] == 1.0 for r in rows)
    assert stats.records == 5 and stats.instruction_rows == 4 and stats.bad == 1


def test_the_role_a_ready_made_taboo_prompt_addresses():
    from spag.game.taboo import Taboo

    taboo = Taboo()
    assert taboo.role_in_prompt("You are the attacker. The target word is x.") == "attacker"
    assert taboo.role_in_prompt("you are a defender") == "defender"
    assert taboo.role_in_prompt("The attacker and the defender talk.") is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["-o", "rows.csv"], "must end in .parquet or .jsonl"),
        (["-o", "rows.jsonl", "--decay", "0"], "--decay: must be > 0"),
        (["-o", "rows.jsonl", "--sft-limit", "5"], "--sft-limit needs --sft"),
        (["-o", "rows.jsonl", "--sft", "no-such-file.json"], "no such file"),
    ],
)
def test_bad_arguments_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "e.jsonl", [DEFENDER_WIN_2])
    result = invoke("reward", "e.jsonl", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl"]


def test_control_arm_keeps_only_sft_rows(tmp_path):
    episodes = tmp_path / "episodes.parquet"
    pq.write_table(pa.Table.from_pylist([ATTACKER_WIN_3, DEFENDER_WIN_2, TIE]), episodes)
    alpaca = tmp_path / "alpaca.json"
    alpaca.write_text(json.dumps([{"instruction": "Name a colour.", "input": "", "output": "Blue."}]))
    out = tmp_path / "rows.parquet"
    stats = build_reward_set(episodes, out, Reward(sft=str(alpaca)), control=True)
    rows = pq.read_table(out).to_pylist()
    assert [r["kind"] for r in rows] == ["sft"]
    assert stats.used == 2 and stats.rows == {"sft": 1}


# ------------------------------------------------------------------ empty and truncated utterances


def _cut(episode, turns, empty=()):
    """``episode`` with the utterances at ``turns`` flagged as cut at max_new_tokens, those at ``empty`` blank."""
    history = [dict(u) for u in episode["history"]]
    for t in turns:
        history[t]["truncated"] = True
    for t in empty:
        history[t]["content"] = "   "
    return {**episode, "history": history}


def test_a_truncated_or_empty_winning_utterance_does_not_become_a_row():
    episode = _cut(ATTACKER_WIN_3, turns=[2], empty=[4])
    rows, stats = reward_rows([episode, DEFENDER_WIN_2])
    attacker = [r for r in rows if r["role"] == "attacker"]
    assert [r["turn"] for r in attacker] == [0]  # turns 2 (cut) and 4 (empty) are gone
    assert stats.dropped_truncated == 1 and stats.dropped_empty == 1
    assert "dropped 1 truncated and 1 empty utterances" in stats.line()
    # The rewards are the game's own shares: leaving a line out does not hand its share to the others.
    assert attacker[0]["reward"] == pytest.approx(utterance_rewards(3)[0])
    kept, kept_stats = reward_rows([episode, DEFENDER_WIN_2], options=Reward(keep_truncated=True))
    assert [r["turn"] for r in kept if r["role"] == "attacker"] == [0, 2, 4]
    assert kept_stats.dropped_truncated == kept_stats.dropped_empty == 0


def test_a_game_whose_every_row_was_cut_is_counted_apart_from_ties_and_fouls():
    """Such a game was counted among those that "gave no rows (tie/foul)"."""
    episode = _cut(DEFENDER_WIN_2, turns=[1, 3])
    rows, stats = imitation_rows([episode, TIE])
    assert rows == [] and stats.used == 0 and stats.dropped_truncated == 2
    assert stats.no_rows == 1 and stats.cut_games == 1  # the tie; the cut game
    assert stats.line().startswith(
        "2 records: 0 games used, 1 gave no rows (tie/foul), 0 skipped as bad; 1 games "
        "left out whole: each rewarded utterance empty or truncated;"
    )
    assert stats.role_games["defender"] == 0  # the role weights do not count a game that gave nothing
    rows, stats = imitation_rows([episode], keep_truncated=True)
    assert len(rows) == 2 and stats.used == 1


def test_a_truncated_foul_line_gives_no_penalty_row_unless_kept():
    foul = {
        "target_word": "piano",
        "max_turns": 5,
        "history": [a("I love the piano and its keys, and also the long evenings when"), d("Nice.")],
    }
    foul = _cut(foul, turns=[0])
    rows, stats = reward_rows([foul], options=Reward(foul_line_penalty=1.0))
    assert rows == [] and stats.dropped_truncated == 1
    rows, _ = reward_rows([foul], options=Reward(foul_line_penalty=1.0, keep_truncated=True))
    assert [r["reward"] for r in rows] == [-1.0]


def test_game_rows_carry_the_bounds_of_their_history_lines():
    rows, _ = reward_rows([ATTACKER_WIN_3])
    for row in rows:
        bounds = row["history_bounds"]
        assert len(bounds) == (row["turn"] + 1 if row["turn"] else 0)
        for t in range(row["turn"]):
            line = row["prompt"][bounds[t] : bounds[t + 1]]
            assert ATTACKER_WIN_3["history"][t]["content"].strip()[:20] in line


def test_spag_reward_keep_truncated_option(tmp_path):
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(json.dumps(_cut(ATTACKER_WIN_3, turns=[0])) + "\n", encoding="utf-8")
    runner = CliRunner()
    dropped = runner.invoke(app, ["reward", str(episodes), "-o", str(tmp_path / "a.jsonl")])
    assert dropped.exit_code == 0, dropped.output
    assert "dropped 1 truncated and 0 empty utterances" in dropped.output
    kept = runner.invoke(app, ["reward", str(episodes), "-o", str(tmp_path / "b.jsonl"), "--keep-truncated"])
    assert kept.exit_code == 0, kept.output
    count = lambda name: len((tmp_path / name).read_text(encoding="utf-8").splitlines())
    assert (count("a.jsonl"), count("b.jsonl")) == (2, 3)


def test_a_game_given_twice_is_learned_from_once(tmp_path):
    once = write_jsonl(tmp_path / "once.jsonl", [DEFENDER_WIN_2, ATTACKER_WIN_1])
    twice = write_jsonl(tmp_path / "twice.jsonl", [DEFENDER_WIN_2, ATTACKER_WIN_1, DEFENDER_WIN_2])
    for command in ("reward", "imitation-data"):
        a, b = tmp_path / f"{command}-once.parquet", tmp_path / f"{command}-twice.parquet"
        assert invoke(command, once, "-o", a).exit_code == 0
        result = invoke(command, twice, "-o", b)
        assert result.exit_code == 0, result.output
        assert "1 repeated games left out" in result.stderr
        strip = [{k: v for k, v in r.items() if k != "episode"} for r in pq.read_table(a).to_pylist()]
        assert [{k: v for k, v in r.items() if k != "episode"} for r in pq.read_table(b).to_pylist()] == strip


def test_a_file_of_bad_records_only_is_an_error_without_strict(tmp_path):
    episodes = write_jsonl(tmp_path / "e.jsonl", BAD[1:5])
    for command in ("reward", "imitation-data"):
        out = tmp_path / f"{command}.parquet"
        result = invoke(command, episodes, "-o", out)
        assert result.exit_code == 2, result.output
        assert "every record is bad (4; the first: " in result.stderr and "record 0" in result.stderr
        assert not out.exists()


def test_skill_credit_rewards_only_wins_by_the_winners_own_play():
    games = [ATTACKER_WIN_3, DEFENDER_WIN_2, ATTACKER_WIN_1, FOUL]
    everything, _ = reward_rows(games)
    skill, stats = reward_rows(games, options=Reward(credit="skill"))
    # the wrong guess on "river" earned its attacker a row; under skill credit it earns nothing
    assert {r["target_word"] for r in everything} == {"piano", "bread", "river"}
    assert {r["target_word"] for r in skill} == {"piano", "bread"}

    def moves(rows):
        return [(r["target_word"], r["role"], r["completion"], r["reward"]) for r in rows]

    assert moves(r for r in everything if r["target_word"] != "river") == moves(skill)
    assert (stats.role_games["attacker"], stats.role_games["defender"]) == (1, 1)
    # the foul penalty is not a win's credit: it stays
    penalised, _ = reward_rows(games, options=Reward(credit="skill", foul_line_penalty=1.0))
    assert [r["reward"] for r in penalised if r["target_word"] == "apple"] == [-1.0]


def test_rows_follow_the_words_not_the_order_the_games_ended(tmp_path):
    """A play stage writes its games as they end (which its batch size and a resume change): the rows, their
    drawn prompts and their order come out the same whichever order the file holds the games in. A file
    whose games carry no word index keeps its own order."""
    games = [
        dict(g, word_index=i, seed=0) for i, g in enumerate([ATTACKER_WIN_3, DEFENDER_WIN_2, ATTACKER_WIN_1])
    ]
    games[0].pop("id")
    played = write_jsonl(tmp_path / "played.jsonl", games)
    ended = write_jsonl(tmp_path / "ended.jsonl", [games[2], games[0], games[1]])

    def rows(command, source):
        out = tmp_path / f"{command}-{source.stem}.parquet"
        result = invoke(command, source, "-o", out, "--seed", 3)
        assert result.exit_code == 0, result.output
        return pq.read_table(out).to_pylist()

    for command in ("reward", "imitation-data"):
        first, second = rows(command, played), rows(command, ended)
        assert [r["target_word"] for r in first if r["kind"] == "game"][:2] == ["piano", "piano"]
        assert [{k: v for k, v in r.items() if k != "episode"} for r in second] == [
            {k: v for k, v in r.items() if k != "episode"} for r in first
        ]

    def without_episode(rows):
        return [{k: v for k, v in r.items() if k != "episode"} for r in rows]

    assert without_episode(reward_rows([games[2], games[0], games[1]], seed=3)[0]) == without_episode(
        reward_rows(games, seed=3)[0]
    )
    unnumbered = [{k: v for k, v in g.items() if k not in ("word_index", "seed")} for g in games]
    as_ended = write_jsonl(tmp_path / "as_ended.jsonl", [unnumbered[2], unnumbered[0], unnumbered[1]])
    assert next(r["target_word"] for r in rows("reward", as_ended) if r["kind"] == "game") == "river"
