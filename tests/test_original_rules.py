"""The original project's judge (`game.rules: original`) against an independent restatement of it."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spag.game.taboo.card import ORIGINAL, WHOLE_WORD
from spag.game.taboo.original import original_forms, plural
from spag.game.taboo.rules import judge

SEED_WORDS = (
    Path(__file__).resolve().parents[2] / "shared" / "seed-data" / "all_target_words.txt"
)  # ../shared


def reference_judge(target_word, history, max_turns):
    """The original's get_game_outcome, written again from its description (a list of regexes, any())."""
    window = r"i know the word! it.{1,8}"
    word = target_word.lower()
    forms = [word, word + "ing", word + "ed", plural(word)]
    forms += [q + f + q for q in ('"', "'", "`") for f in forms]

    def says(text):
        return any(f in text.lower() for f in forms)

    def guesses(text):
        return re.search(window, text.lower()) is not None

    def right(text):
        return any(re.search(window + f, text.lower()) for f in forms)

    n = 0
    for item in history:
        n += 1
        if item["role"] == "defender":
            if guesses(item["content"]):
                return ("defender_wins" if right(item["content"]) else "attacker_wins"), n
            if says(item["content"]):
                return "attacker_wins", n
        elif says(item["content"]) or guesses(item["content"]):
            return "attacker_breaks_rules", n
        if n >= max_turns * 2:
            break
    return "tie", n


def game(*lines):
    return [{"role": "attacker" if i % 2 == 0 else "defender", "content": c} for i, c in enumerate(lines)]


CASES = [
    # (target, utterances, original outcome, whole-word outcome)
    ("cat", ["Let us talk about categories.", "fine"], "attacker_breaks_rules", "tie"),  # substring
    ("see", ["What grows from seeds?", "hmm"], "attacker_breaks_rules", "tie"),
    ("cat", ["pets?", "I like the CATALOGUE"], "attacker_wins", "tie"),  # lower-cased
    ("run", ["sport?", "I went running"], "attacker_wins", "attacker_wins"),  # w + "ing"
    ("walk", ["legs?", "I walked home"], "attacker_wins", "attacker_wins"),  # w + "ed"
    ("child", ["kids?", "Many children here"], "attacker_wins", "attacker_wins"),  # plural
    ("mouse", ["rodent?", "The mice ran"], "attacker_wins", "attacker_wins"),
    ("mouse", ["rodent?", "my mousepad"], "attacker_wins", "tie"),  # substring of w
    ("apple", ["fruit?", 'It is not "apple"'], "attacker_wins", "attacker_wins"),  # quotes
    ("apple", ["fruit?", "I know the word! It is apple"], "defender_wins", "defender_wins"),
    ("apple", ["fruit?", "I know the word! It is an apple"], "defender_wins", "defender_wins"),
    ("apple", ["fruit?", "I know the word! It is the red apple"], "attacker_wins", "attacker_wins"),  # > 8
    ("apple", ["fruit?", "I know the word! It's apples"], "defender_wins", "defender_wins"),
    ("apple", ["fruit?", "I know the word! It is: 'apple'"], "defender_wins", "defender_wins"),  # quote: 9
    (
        "apple",
        ["fruit?", "I know the word! It is the 'apple'"],
        "defender_wins",
        "attacker_wins",
    ),  # quoted: 8+1
    (
        "apple",
        ["fruit?", "I know the word! It is the  apple"],
        "attacker_wins",
        "defender_wins",
    ),  # 9: too far
    ("apple", ["fruit?", "I know the word! It is pineapple"], "defender_wins", "attacker_wins"),
    ("apple", ["fruit?", "I know the word! It\napple"], "attacker_wins", "attacker_wins"),  # no newline
    ("apple", ["fruit?", "I know the word: apple"], "attacker_wins", "defender_wins"),  # no "! it"
    ("apple", ["fruit?", "I know the word!It is apple"], "attacker_wins", "defender_wins"),  # no window
    ("apple", ["I know the word! It is pear", "no"], "attacker_breaks_rules", "attacker_breaks_rules"),
    ("apple", ["fruit?", "pear", "again", "plum"], "tie", "tie"),
    ("tree", ["wood?", "maybe", "yes", "street"], "attacker_wins", "tie"),  # 4th utterance
]


@pytest.mark.parametrize("target, lines, original, whole_word", CASES)
def test_constructed_cases(target, lines, original, whole_word):
    history = game(*lines)
    verdict = judge(target, history, 5, rules=ORIGINAL)
    assert verdict.outcome == original
    assert (verdict.outcome, verdict.turns) == reference_judge(target, history, 5)
    assert judge(target, history, 5, rules=WHOLE_WORD).outcome == whole_word


def test_only_two_max_turns_utterances_are_judged():
    history = game("hello", "hi", "so", "the cat")
    assert judge("cat", history, 1, rules=ORIGINAL).outcome == "tie"
    assert judge("cat", history, 2, rules=ORIGINAL).outcome == "attacker_wins"
    assert judge("cat", history, 1, rules=ORIGINAL).turns == 2


@pytest.mark.parametrize(
    "word, expected",
    [
        ("cat", "cats"),
        ("child", "children"),
        ("mouse", "mice"),
        ("city", "cities"),
        ("box", "boxes"),
        ("sheep", "sheep"),
        ("knife", "knives"),
        ("person", "people"),
        ("analysis", "analyses"),
        ("criterion", "criteria"),
        ("would", "woulds"),
        ("the", "thes"),
        ("cannot", "cans"),
        ("gonna", "gons"),  # TextBlob's tokenizer cuts these before pluralising
    ],
)
def test_plural_is_textblobs(word, expected):
    assert plural(word) == expected


def test_forms_are_the_four_and_their_quoted_versions():
    assert original_forms("Dog") == (
        "dog",
        "doging",
        "doged",
        "dogs",
        '"dog"',
        '"doging"',
        '"doged"',
        '"dogs"',
        "'dog'",
        "'doging'",
        "'doged'",
        "'dogs'",
        "`dog`",
        "`doging`",
        "`doged`",
        "`dogs`",
    )


@pytest.mark.skipif(not SEED_WORDS.exists(), reason="the original's word list is not on this machine")
def test_every_word_of_the_original_list_has_a_plural():
    words = SEED_WORDS.read_text().split()[:3000]
    plurals = [plural(w) for w in words]
    assert all(p and p.isalpha() for p in plurals)


PIECES = [
    "i know the word! it",
    "I KNOW THE WORD! IT",
    " is ",
    "'s ",
    " ",
    ": ",
    "\n",
    '"',
    "'",
    "`",
    "a ",
    "the ",
    "well, ",
    "rain",
    "rains",
    "raining",
    "rained",
    "rainy",
    "brain",
    "train",
    "trains",
    "cat",
    "cats",
    "category",
    "caught",
    "scatter",
    "hello",
    "!",
    ".",
    "sun",
    "i know",
]


@pytest.mark.parametrize("seed", range(40))
def test_random_games_agree_with_the_restatement(seed):
    rng = random.Random(seed)
    for _ in range(50):
        target = rng.choice(["rain", "cat", "train", "sun"])
        history = game(
            *("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(0, 6)))
        )
        max_turns = rng.randint(1, 3)
        verdict = judge(target, history, max_turns, rules=ORIGINAL)
        assert (verdict.outcome, verdict.turns) == reference_judge(target, history, max_turns), history


@pytest.mark.slow
def test_cli_judge_with_the_original_rules(tmp_path):
    games = [
        {"target_word": "cat", "max_turns": 5, "history": game("a category", "ok")},
        {
            "target_word": "apple",
            "max_turns": 5,
            "history": game("fruit?", "I know the word! It is pineapple"),
        },
    ]
    src = tmp_path / "games.json"
    src.write_text(json.dumps(games))

    def outcomes(*options):
        result = subprocess.run(
            [sys.executable, "-m", "spag.cli", "judge", src, *options], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return [json.loads(line)["outcome"] for line in result.stdout.splitlines()]

    assert outcomes("--rules", "original") == ["attacker_breaks_rules", "defender_wins"]
    assert outcomes() == ["tie", "attacker_wins"]
    bad = subprocess.run(
        [sys.executable, "-m", "spag.cli", "judge", src, "--rules", "loose"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--rules" in bad.stderr
