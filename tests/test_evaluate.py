"""Game win rates: Wilson intervals, per-role tallies of judged episodes, and `spag evaluate` end to end."""

import json
import subprocess
import sys

import pytest

from spag.evaluate.games import check_held_out, rate_fields, score, tally_games, tally_role, wilson_interval
from spag.game.episodes import judged
from spag.game.taboo import Taboo
from spag.game.taboo.outcomes import (
    ATTACKER,
    ATTACKER_BREAKS_RULES,
    ATTACKER_WINS,
    DEFENDER,
    DEFENDER_WINS,
    TIE,
)
from spag.runtime.errors import DataError

TABOO = Taboo()

# ------------------------------------------------------------------------------------------- Wilson


@pytest.mark.parametrize(
    "successes,n,low,high",
    [
        # hand-computed from (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), z = 1.959964
        (5, 10, 0.236593, 0.763407),
        (0, 10, 0.0, 0.277533),
        (10, 10, 0.722467, 1.0),
        (1, 4, 0.045587, 0.699358),
        (0, 1, 0.0, 0.793451),  # z²/(1 + z²),
    ],
)
def test_wilson_interval_hand_computed(successes, n, low, high):
    got = wilson_interval(successes, n)
    assert got == pytest.approx((low, high), abs=1e-6)


def test_wilson_interval_edges_are_exact_and_no_trials_is_uninformative():
    assert wilson_interval(0, 50)[0] == 0.0
    assert wilson_interval(50, 50)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_wilson_interval_narrows_with_more_games_and_holds_the_rate():
    small, large = wilson_interval(5, 10), wilson_interval(500, 1000)
    assert small[0] < 0.5 < small[1] and large[0] < 0.5 < large[1]
    assert large[1] - large[0] < small[1] - small[0]


def test_rate_fields_names_and_values():
    fields = rate_fields("win", 5, 10)
    assert fields["win_rate"] == 0.5
    assert (fields["win_rate_low"], fields["win_rate_high"]) == pytest.approx(wilson_interval(5, 10))


# ------------------------------------------------------------------------------------------- tallies


def episode(target, *utterances, max_turns=2):
    roles = [ATTACKER, DEFENDER] * max_turns
    return {
        "target_word": target,
        "max_turns": max_turns,
        "history": [{"role": r, "content": c} for r, c in zip(roles, utterances)],
    }


# Judged by the real judge: one of each outcome.
GAMES = judged(
    [
        episode(
            "apple", "A fruit that keeps the doctor away.", "I know the word! It is apple"
        ),  # defender wins
        episode("apple", "Say a red fruit.", "I know the word! It is cherry"),  # attacker wins
        episode("apple", "Think of apples.", "Hmm."),  # rule break
        episode("apple", "Hello.", "Hi.", "Nice day.", "Yes it is."),  # tie
        episode("apple", "What fell on Newton?", "An apple, I think."),  # attacker wins
    ],
    TABOO,
)


def test_games_are_judged_as_expected():
    assert [g["outcome"] for g in GAMES] == [
        DEFENDER_WINS,
        ATTACKER_WINS,
        ATTACKER_BREAKS_RULES,
        TIE,
        ATTACKER_WINS,
    ]


def test_tally_as_attacker_counts_the_models_own_fouls_apart():
    t = tally_role(TABOO, [g["outcome"] for g in GAMES], ATTACKER)
    assert (t["games"], t["wins"], t["losses"], t["ties"], t["fouls"]) == (5, 2, 1, 1, 1)
    assert t["win_rate"] == pytest.approx(0.4)
    assert t["win_rate"] + t["loss_rate"] + t["tie_rate"] + t["foul_rate"] == pytest.approx(1.0)
    assert (t["win_rate_low"], t["win_rate_high"]) == pytest.approx(wilson_interval(2, 5))


def test_tally_as_defender_counts_the_opponents_foul_as_a_win_and_reports_it():
    t = tally_role(TABOO, [g["outcome"] for g in GAMES], DEFENDER)
    assert (t["games"], t["wins"], t["losses"], t["ties"], t["opponent_fouls"]) == (5, 2, 2, 1, 1)
    assert "fouls" not in t
    assert t["win_rate"] + t["loss_rate"] + t["tie_rate"] == pytest.approx(1.0)
    assert t["opponent_foul_rate"] == pytest.approx(0.2)


def test_tally_games_overall_and_points():
    metrics = tally_games(TABOO, GAMES, GAMES[:2])
    assert metrics["games"] == 7
    overall = metrics["overall"]
    # attacker: 2 wins, 1 loss, 1 tie, 1 foul; defender on the first two: 1 win, 1 loss
    assert (overall["wins"], overall["losses"], overall["ties"], overall["fouls"]) == (3, 2, 1, 1)
    assert overall["win_rate"] == pytest.approx(3 / 7)
    assert overall["score"] == pytest.approx(3.5 / 7)
    json.dumps(metrics)  # numbers only: fit for dvc metrics


def test_tally_rejects_unjudged_episodes_and_unknown_outcomes():
    with pytest.raises(ValueError, match="not been judged"):
        tally_games(TABOO, [{"target_word": "a"}], [])
    with pytest.raises(ValueError, match="unknown outcome"):
        tally_role(TABOO, ["draw"], ATTACKER)


def test_score_per_role():
    assert score(TABOO, ATTACKER_WINS, ATTACKER) == 1.0 and score(TABOO, ATTACKER_WINS, DEFENDER) == 0.0
    assert (
        score(TABOO, ATTACKER_BREAKS_RULES, ATTACKER) == 0.0
        and score(TABOO, ATTACKER_BREAKS_RULES, DEFENDER) == 1.0
    )
    assert score(TABOO, TIE, ATTACKER) == score(TABOO, TIE, DEFENDER) == 0.5


def test_check_held_out_refuses_training_words():
    check_held_out(TABOO, ["river", "mountain"], ["apple", "pear"])
    with pytest.raises(DataError, match=r"2 of 3 evaluation words are also training words.*Apple, pear"):
        check_held_out(TABOO, ["Apple", "pear", "river"], ["apple", "pear"], "eval.txt", "train.txt")


# ------------------------------------------------------------------------------------------ end to end


def spag(*args):
    return subprocess.run(
        [sys.executable, "-m", "spag.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from spag.testing import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("tiny")
    return make_tiny_checkpoint(root / "model_a", seed=0), make_tiny_checkpoint(root / "model_b", seed=1)


def test_evaluate_refuses_overlapping_words(tmp_path, tiny):
    words, train = tmp_path / "eval.txt", tmp_path / "train.txt"
    words.write_text("river\napple\n")
    train.write_text("apple\npear\n")
    result = spag(
        "evaluate",
        "--model",
        tiny[0],
        "--opponent",
        tiny[1],
        "--words",
        words,
        "--train-words",
        train,
        "-o",
        tmp_path / "m.json",
    )
    assert result.returncode == 2
    assert "1 of 2 evaluation words are also training words" in result.stderr
    assert not (tmp_path / "m.json").exists()


@pytest.mark.slow
def test_evaluate_plays_both_roles_on_the_tiny_model(tmp_path, tiny):
    words, train = tmp_path / "eval.txt", tmp_path / "train.txt"
    words.write_text("river\nmountain\ncoffee\n")
    train.write_text("apple\npear\n")
    out, episodes = tmp_path / "games.json", tmp_path / "episodes.parquet"
    result = spag(
        "evaluate",
        "--model",
        tiny[0],
        "--opponent",
        tiny[1],
        "--words",
        words,
        "--train-words",
        train,
        "--max-turns",
        1,
        "--max-new-tokens",
        8,
        "--batch-size",
        4,
        "-o",
        out,
        "--episodes-out",
        episodes,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(out.read_text())
    assert metrics["games"] == 6
    assert metrics["attacker"]["games"] == metrics["defender"]["games"] == 3
    for role in ("attacker", "defender"):
        section = metrics[role]
        assert section["wins"] + section["losses"] + section["ties"] + section.get("fouls", 0) == 3
        assert 0.0 <= section["win_rate_low"] <= section["win_rate"] <= section["win_rate_high"] <= 1.0
    assert "[spag evaluate]" in result.stderr

    from spag.game.episodes import judged, read_episodes

    played = read_episodes(episodes)
    assert len(played) == 6
    # The stored outcomes are the judge's, and the tallies are those of the stored episodes.
    assert [e["outcome"] for e in judged(played, TABOO)] == [e["outcome"] for e in played]
    attack = [e for e in played if e["attacker_model"] == played[0]["attacker_model"]]
    assert len(attack) == 3 and {e["target_word"] for e in attack} == {"river", "mountain", "coffee"}
    assert tally_role(TABOO, [e["outcome"] for e in attack], ATTACKER)["wins"] == metrics["attacker"]["wins"]


# ------------------------------------------------------------------------- bootstrap over target words


_CAUSE = {
    ATTACKER_WINS: "wrong_guess",
    DEFENDER_WINS: "correct_guess",
    TIE: "out_of_turns",
    ATTACKER_BREAKS_RULES: "attacker_said_word",
}


def games_of(word, outcomes):
    from spag.testing import episode_ending

    return [episode_ending(word, _CAUSE[o]) for o in outcomes]


def test_word_bootstrap_values_by_hand():
    from spag.evaluate.games import word_bootstrap

    as_attacker = games_of("apple", [ATTACKER_WINS, ATTACKER_BREAKS_RULES]) + games_of(
        "river", [TIE, DEFENDER_WINS]
    )
    as_defender = games_of("apple", [ATTACKER_BREAKS_RULES, TIE]) + games_of(
        "river", [DEFENDER_WINS, ATTACKER_WINS]
    )
    boot = word_bootstrap(TABOO, as_attacker, as_defender, n_resamples=2000)
    # attacker points: 1, 0, 1/2, 0; defender points: 1 (opponent foul), 1/2, 1, 0 -> 4 / 8
    assert boot["score"]["value"] == pytest.approx(0.5) and boot["score"]["games"] == 8
    assert boot["attacker_win_rate"]["value"] == pytest.approx(0.25)
    assert boot["attacker_foul_rate"]["value"] == pytest.approx(0.25)
    assert boot["defender_win_rate"]["value"] == pytest.approx(0.5)
    assert boot["defender_opponent_foul_rate"]["value"] == pytest.approx(0.25)
    parts = boot.pop("decomposition")
    for entry in [*boot.values(), *parts["attacker"].values(), *parts["defender"].values()]:
        assert 0 <= entry["low"] <= entry["value"] <= entry["high"] <= 1 and entry["words"] == 2


def test_per_word_by_role_agrees_with_the_bootstrap_and_the_scores():
    from spag.evaluate.games import per_word_by_role, per_word_scores, word_bootstrap

    as_attacker = games_of("apple", [ATTACKER_WINS, ATTACKER_BREAKS_RULES]) + games_of(
        "river", [TIE, DEFENDER_WINS]
    )
    as_defender = games_of("apple", [ATTACKER_BREAKS_RULES, TIE]) + games_of(
        "river", [DEFENDER_WINS, ATTACKER_WINS]
    )
    by_role = per_word_by_role(TABOO, as_attacker, as_defender)
    assert by_role["attacker/score"] == {"apple": (1.0, 2), "river": (0.5, 2)}
    assert by_role["defender/score"] == {"apple": (1.5, 2), "river": (1.0, 2)}
    both = per_word_scores(TABOO, as_attacker, as_defender)
    for word in ("apple", "river"):  # the roles add up to the score over both
        assert by_role["attacker/score"][word][0] + by_role["defender/score"][word][0] == both[word][0]
    boot = word_bootstrap(TABOO, as_attacker, as_defender, n_resamples=200)["decomposition"]
    for name, per_word in by_role.items():
        role, _, part = name.partition("/")
        if part != "score":
            share = sum(s for s, _ in per_word.values()) / sum(n for _, n in per_word.values())
            assert share == pytest.approx(boot[role][part]["value"]), name


def test_word_bootstrap_resamples_words_not_games():
    """Ten words, each always won or always lost over 20 games: the evidence is ten words, not 200 games."""
    from spag.evaluate.games import word_bootstrap

    as_attacker = [
        g for i in range(10) for g in games_of(f"word{chr(97 + i)}", [ATTACKER_WINS if i % 2 else TIE] * 20)
    ]
    boot = word_bootstrap(TABOO, as_attacker, [], n_resamples=4000)["attacker_win_rate"]
    wilson_low, wilson_high = wilson_interval(100, 200)
    assert boot["value"] == pytest.approx(0.5) and boot["games"] == 200 and boot["words"] == 10
    assert (boot["high"] - boot["low"]) > 2.5 * (wilson_high - wilson_low)
    # The same games spread so that every word has half wins: words agree, the interval collapses.
    mixed = [g for i in range(10) for g in games_of(f"word{chr(97 + i)}", [ATTACKER_WINS, TIE] * 10)]
    tight = word_bootstrap(TABOO, mixed, [], n_resamples=4000)["attacker_win_rate"]
    assert tight["low"] == pytest.approx(0.5) and tight["high"] == pytest.approx(0.5)


def test_word_bootstrap_is_seeded_and_one_word_is_uninformative():
    from spag.evaluate.games import word_bootstrap

    games = [
        g for i in range(6) for g in games_of(f"word{chr(97 + i)}", [ATTACKER_WINS] * i + [TIE] * (5 - i))
    ]
    assert word_bootstrap(TABOO, games, [], seed=3) == word_bootstrap(TABOO, games, [], seed=3)
    single = word_bootstrap(TABOO, games_of("river", [ATTACKER_WINS, TIE]), [])["attacker_win_rate"]
    assert (single["low"], single["high"]) == (0.0, 1.0)
