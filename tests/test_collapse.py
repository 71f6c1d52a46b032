"""Self-play's collapse figures: each game's measure of how varied its play was (Game.collapse_metrics), on
hand-made episodes, and the play stage writing them into the epoch's selfplay.json figures."""

from __future__ import annotations

import pytest

from spag.game.episodes import EpisodeStore, judged
from spag.game.kuhn import FIRST, SECOND, KuhnPoker, information_sets
from spag.game.taboo import Taboo
from spag.pipeline.stages.play import selfplay_figures

TABOO, KUHN = Taboo(), KuhnPoker()


def said(role, content, truncated=False):
    return {"role": role, "content": content, "n_tokens": len(content.split()), "truncated": truncated}


def taboo_episodes():
    """Three games: the attacker opens two of them with the same line (case and spacing aside), the
    defender says nothing once and never speaks in the third, one attacker line is cut."""
    return [
        {
            "target_word": "apple",
            "max_turns": 2,
            "history": [
                said("attacker", "It is red."),
                said("defender", "Is it a cherry?"),
                said("attacker", "It grows on trees"),
                said("defender", ""),
            ],
        },
        {
            "target_word": "river",
            "max_turns": 2,
            "history": [
                said("attacker", "it is  RED."),
                said("defender", "Is it a cherry?"),
                said("attacker", "Water flows in it and it is very long and", truncated=True),
                said("defender", "I know the word! It is river."),
            ],
        },
        {
            "target_word": "coffee",
            "max_turns": 2,
            "history": [said("attacker", "You drink coffee in the morning.")],
        },
    ]


def test_taboo_counts_distinct_replies_and_openings_lengths_empty_and_truncated_per_role():
    figures = TABOO.collapse_metrics(taboo_episodes())
    assert figures["shares"] == {
        "attacker_distinct_replies": pytest.approx(4 / 5),
        "attacker_distinct_openings": pytest.approx(2 / 3),
        "attacker_empty": 0.0,
        "attacker_truncated": pytest.approx(1 / 5),
        "defender_distinct_replies": pytest.approx(3 / 4),
        "defender_distinct_openings": pytest.approx(1 / 2),
        "defender_empty": pytest.approx(1 / 4),
        "defender_truncated": 0.0,
    }
    # words: 3 + 4 + 3 + 10 + 6 over five attacker lines; 4 + 0 + 4 + 7 over four defender lines
    assert figures["lengths"] == {
        "attacker_words_per_reply": pytest.approx(26 / 5),
        "defender_words_per_reply": pytest.approx(15 / 4),
    }
    assert figures["counts"] == {
        "attacker_replies": 5,
        "attacker_games": 3,
        "defender_replies": 4,
        "defender_games": 2,
    }


def test_taboo_says_none_where_there_was_nothing_to_measure():
    """Imported games record no truncation; a role that never spoke has no shares."""
    plain = [
        {"target_word": "coffee", "max_turns": 2, "history": [{"role": "attacker", "content": "A coffee."}]}
    ]
    figures = TABOO.collapse_metrics(plain)
    assert figures["shares"]["attacker_truncated"] is None and figures["shares"]["attacker_empty"] == 0.0
    assert figures["shares"]["defender_distinct_replies"] is None
    assert figures["lengths"]["defender_words_per_reply"] is None and figures["counts"]["defender_games"] == 0


def hand(deal, *replies, max_turns=2):
    return {
        "target_word": deal,
        "max_turns": max_turns,
        "history": [{"role": (FIRST, SECOND)[i % 2], "content": r} for i, r in enumerate(replies)],
    }


KUHN_HANDS = [
    hand("J-Q", "[bet]", "I [fold]."),
    hand("J-K", "[check]", "[bet]", "[fold]"),
    hand("J-Q", "I pass"),  # no action: a rule break, the hand ends there
    hand("J-K", "[bet]", "[call]"),
    hand("Q-K", "[check]", "[call]"),  # nothing to call after a check: a rule break
    hand("Q-J", "[check]", "[check]", "[bet]"),  # the hand ended at check-check: the third line is not read
    hand("Q-J", "[check]", "[bet]", "[call]", max_turns=1),  # one round: the call comes after the hand's end
]


def test_kuhn_entropy_of_the_actions_played_at_each_information_set_a_rule_break_its_own_outcome():
    figures = KUHN.collapse_metrics(KUHN_HANDS)
    assert list(figures["entropy_bits"]) == list(figures["counts"]) == information_sets()
    assert len(information_sets()) == 12
    entropy = {name: bits for name, bits in figures["entropy_bits"].items() if bits is not None}
    # first with J at the opening: bet, check, rule break, bet -> -(1/2 log 1/2 + 2 * 1/4 log 1/4) = 1.5 bits
    assert entropy == {
        "first_J_opening": pytest.approx(1.5),
        "first_Q_opening": 0.0,
        "first_J_check_bet": 0.0,
        "second_J_check": pytest.approx(1.0),
        "second_K_check": pytest.approx(1.0),
        "second_Q_bet": 0.0,
        "second_K_bet": 0.0,
    }
    assert {name: n for name, n in figures["counts"].items() if n} == {
        "first_J_opening": 4,
        "first_Q_opening": 3,
        "first_J_check_bet": 1,
        "second_J_check": 2,
        "second_K_check": 2,
        "second_Q_bet": 1,
        "second_K_bet": 1,
    }
    assert figures["entropy_bits"]["first_K_opening"] is None and figures["counts"]["first_K_opening"] == 0


def test_an_even_mix_of_the_two_legal_actions_is_one_bit_and_always_the_same_is_zero():
    mixed = KUHN.collapse_metrics([hand("K-J", "[bet]", "[fold]"), hand("K-Q", "[check]", "[check]")])
    assert mixed["entropy_bits"]["first_K_opening"] == pytest.approx(1.0)
    assert mixed["entropy_bits"]["second_J_bet"] == mixed["entropy_bits"]["second_Q_check"] == 0.0


def store(folder, episodes, game):
    """Episodes as the play engine stores them: a Parquet shard of the episode schema, with the game."""
    EpisodeStore(folder).append([{**e, **game.record()} for e in judged(episodes, game)])


@pytest.mark.parametrize(
    "game, episodes, group", [(TABOO, taboo_episodes(), "shares"), (KUHN, KUHN_HANDS, "entropy_bits")]
)
def test_the_play_stage_writes_the_games_collapse_figures_beside_its_rates(tmp_path, game, episodes, group):
    store(tmp_path / "episodes", episodes, game)
    figures = selfplay_figures(game, tmp_path / "episodes")
    assert figures["games"] == len(episodes) and 0 <= figures["foul_rate"] <= 1
    assert figures["collapse"] == game.collapse_metrics(episodes) and figures["collapse"][group]
