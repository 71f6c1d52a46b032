"""The rules of Adversarial Taboo: word forms, the prediction phrase, and the judge."""

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spag.game.taboo.outcomes import ATTACKER_BREAKS_RULES, ATTACKER_WINS, DEFENDER_WINS, TIE
from spag.game.taboo.rules import is_form_of, judge, parse_prediction, says_word, word_forms


def a(text):
    return {"role": "attacker", "content": text}


def d(text):
    return {"role": "defender", "content": text}


# ------------------------------------------------------------------------------------------ word forms


@pytest.mark.parametrize(
    "word, form",
    [
        ("cat", "cats"),
        ("write", "wrote"),
        ("write", "written"),
        ("write", "writing"),
        ("run", "ran"),
        ("child", "children"),
        ("big", "bigger"),
        ("big", "biggest"),
        ("good", "better"),
        ("happy", "happier"),
        ("mouse", "mice"),
    ],
)
def test_irregular_and_regular_forms_count(word, form):
    assert form in word_forms(word)
    assert says_word(f"I think of {form} often", word)


def test_unknown_word_falls_back_to_regular_suffixes():
    forms = word_forms("zorblax")
    assert {"zorblax", "zorblaxes", "zorblaxed", "zorblaxing"} <= forms
    assert says_word("We were zorblaxing all day", "zorblax")


@pytest.mark.parametrize(
    "text",
    [
        "The CAT sat down.",
        'He said "cat".',
        "A `cat` in backticks",
        "That is the cat's toy",
        "a cat-like grace",
        "(cat)",
        "cat!",
        "Cats are lovely",
        "—cat—",
    ],
)
def test_punctuation_case_and_possessive_do_not_hide_the_word(text):
    assert says_word(text, "cat")


@pytest.mark.parametrize(
    "text, word",
    [
        ("the category is wide", "cat"),
        ("a pineapple pizza", "apple"),
        ("concatenate strings", "cat"),
        ("scattered leaves", "cat"),
        ("the bookshelf", "book"),
    ],
)
def test_longer_words_that_contain_the_target_do_not_count(text, word):
    assert not says_word(text, word)


def test_target_word_is_normalised():
    assert says_word("an apple a day", "  Apple ")
    assert is_form_of("Apples!", "apple")
    assert is_form_of("'wrote'", "write")
    assert not is_form_of("pineapple", "apple")


# ------------------------------------------------------------------------------------------ prediction


@pytest.mark.parametrize(
    "text, guess",
    [
        ("I know the word! It is apple", "apple"),
        ("i know the word! it is APPLE.", "apple"),
        ("I know the word! It's apple", "apple"),
        ("I know the word! It’s 'apple'!", "apple"),
        ('Hmm. I know the word! It is "apple", surely.', "apple"),
        ("I know the word! It is `apple`", "apple"),
        ("I know the word! It is an apple", "apple"),
        ("I know the word! It is apple. I know the word! It is pear", "apple"),
        ("I know the word! It is ice cream", "ice"),
        ("I know the word!", ""),
    ],
)
def test_prediction_phrase_is_parsed(text, guess):
    assert parse_prediction(text) == guess


def test_no_prediction_phrase():
    assert parse_prediction("I know many words, but not this one") is None
    assert parse_prediction("") is None


# ----------------------------------------------------------------------------------------------- judge


def test_attacker_saying_the_word_breaks_the_rules():
    v = judge("apple", [a("Do you like apples?")], 5)
    assert (v.outcome, v.turns, v.cause) == (ATTACKER_BREAKS_RULES, 1, "attacker_said_word")


def test_attacker_using_the_prediction_phrase_breaks_the_rules():
    v = judge("apple", [a("Tell me about fruit."), d("Fruit is sweet."), a("I know the word! It is pear")], 5)
    assert (v.outcome, v.turns, v.cause) == (ATTACKER_BREAKS_RULES, 3, "attacker_guessed")


def test_defender_correct_guess_wins():
    v = judge("write", [a("What do authors do?"), d("I know the word! It is writing")], 5)
    assert (v.outcome, v.turns, v.cause) == (DEFENDER_WINS, 2, "correct_guess")
    assert v.winner == "defender" and v.decided


def test_defender_wrong_guess_loses():
    v = judge("apple", [a("A red fruit?"), d("I know the word! It is cherry")], 5)
    assert (v.outcome, v.turns, v.cause) == (ATTACKER_WINS, 2, "wrong_guess")
    assert v.winner == "attacker"


def test_defender_empty_guess_loses():
    assert judge("apple", [a("A red fruit?"), d("I know the word!")], 5).outcome == ATTACKER_WINS


def test_defender_saying_the_word_loses():
    history = [a("What keeps the doctor away?"), d("An apple a day, they say.")]
    v = judge("apple", history, 5)
    assert (v.outcome, v.turns, v.cause) == (ATTACKER_WINS, 2, "defender_said_word")


def test_defender_saying_an_inflected_form_loses():
    history = [a("What did Shakespeare do with a quill?"), d("He wrote plays.")]
    assert judge("write", history, 5).outcome == ATTACKER_WINS


def test_defender_saying_a_containing_word_does_not_lose():
    history = [a("Name a group of things"), d("A category, perhaps.")]
    v = judge("cat", history, 1)
    assert (v.outcome, v.turns, v.cause) == (TIE, 2, "out_of_turns")


def test_a_correct_guess_beats_having_said_the_word_in_the_same_utterance():
    # The guess is the deciding act: the phrase names the word by necessity.
    history = [a("A fruit"), d("Apple? I know the word! It is apple")]
    assert judge("apple", history, 5).outcome == DEFENDER_WINS


def test_tie_when_nothing_is_decided():
    history = [a("hello"), d("hi"), a("how are you"), d("fine")]
    v = judge("apple", history, 2)
    assert (v.outcome, v.turns) == (TIE, 4)
    assert not v.decided and v.winner is None


def test_history_that_ends_early_is_a_tie():
    v = judge("apple", [a("hello")], 5)
    assert (v.outcome, v.turns) == (TIE, 1)
    assert judge("apple", [], 5).turns == 0


def test_utterances_past_the_turn_limit_are_ignored():
    history = [a("hello"), d("hi"), a("fruit?"), d("I know the word! It is apple")]
    v = judge("apple", history, 1)
    assert (v.outcome, v.turns) == (TIE, 2)
    assert judge("apple", history, 2).outcome == DEFENDER_WINS


def test_first_decisive_utterance_wins():
    history = [a("fruit?"), d("I know the word! It is pear"), a("apple!"), d("I know the word! It is apple")]
    v = judge("apple", history, 5)
    assert (v.outcome, v.turns) == (ATTACKER_WINS, 2)


def test_unknown_role_is_an_error():
    with pytest.raises(ValueError, match="unknown role"):
        judge("apple", [{"role": "referee", "content": "x"}], 5)


# ---------------------------------------------------------------------------------------- properties

_words = st.text(alphabet=string.ascii_lowercase, min_size=3, max_size=8)


@settings(max_examples=200, deadline=None)
@given(word=_words, text=st.text(alphabet=string.ascii_letters + " .,!?'\"-`", max_size=80))
def test_text_with_no_form_of_the_word_never_counts(word, text):
    forms = word_forms(word)
    tokens = {t.lower() for t in "".join(c if c.isalpha() or c == "'" else " " for c in text).split()}
    tokens |= {t.strip("'") for t in tokens}
    tokens |= {t[:-2] for t in tokens if t.endswith("'s")}
    if forms & tokens:
        return  # the text happens to contain a form: not the property under test
    assert not says_word(text, word)


@settings(max_examples=200, deadline=None)
@given(
    word=_words,
    before=st.text(alphabet=string.ascii_letters, min_size=1, max_size=4),
    after=st.text(alphabet=string.ascii_letters, min_size=1, max_size=4),
    left=st.booleans(),
)
def test_word_embedded_in_a_longer_word_never_counts(word, before, after, left):
    embedded = (before + word) if left else (word + after)
    if embedded.lower() in word_forms(word):
        return  # e.g. "cats" is a real form of "cat"
    assert not says_word(f"look: {embedded} here", word)
    assert says_word(f"look: {word} here", word)


def test_every_cause_belongs_to_its_outcome_under_both_rule_sets():
    from spag.game.taboo.outcomes import CAUSES
    from spag.game.taboo.rules import judge_episode
    from spag.testing import episode_ending

    for outcome, causes in CAUSES.items():
        for cause in causes:
            episode = episode_ending("apple", cause)
            for rules in ("whole-word", "original"):
                verdict = judge_episode(episode, rules)
                assert (verdict.outcome, verdict.cause) == (outcome, cause), (cause, rules)
