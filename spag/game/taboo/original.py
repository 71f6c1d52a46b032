"""The original project's judge (``game.rules: original``), for numbers comparable with the paper's.

The SPAG paper's outcomes, and so which rows it trained on, come from a looser rule than this project's
whole-word judge (:mod:`spag.game.rules`, the default). Restated from its description:

- the *forms* of a target word w are w, w + "ing", w + "ed" and the plural of w (TextBlob's pattern-based
  ``pluralize`` of the first token of w), each also wrapped in "", '' and `` quotes;
- an utterance *says* the word when one of its forms occurs anywhere in the lower-cased text, as a
  substring: "category" says "cat", "seeds" says "see";
- an utterance *guesses* when the lower-cased text matches ``i know the word! it`` followed by 1 to 8
  characters other than a newline; the guess is *right* when a form begins right after such a window:
  "i know the word! it is apple" guesses "apple" right (window " is "), while "i know the word! it is the
  red apple" does not (" is the red " is 12 characters) and so loses the game for the defender.

The walk through the game is the same as the default judge's: the attacker loses at once by saying the
word or guessing; a defender's guess ends the game (right: the defender wins, wrong: the attacker wins);
a defender who says the word loses; after 2 · max_turns utterances the game is a tie.

The one liberty taken: a form is matched literally (escaped), where the original put the word into the
regular expression as it was. The two differ only for a target word with regex metacharacters (no word
of the original's list has one).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from functools import lru_cache

from spag.game.taboo.outcomes import (
    ATTACKER,
    ATTACKER_BREAKS_RULES,
    ATTACKER_GUESSED,
    ATTACKER_SAID_WORD,
    ATTACKER_WINS,
    CORRECT_GUESS,
    DEFENDER,
    DEFENDER_SAID_WORD,
    DEFENDER_WINS,
    OUT_OF_TURNS,
    TIE,
    WRONG_GUESS,
    verdict,
)

GUESS_WINDOW = r"i know the word! it.{1,8}"
_GUESS = re.compile(GUESS_WINDOW)
_QUOTED = ('"{}"', "'{}'", "`{}`")


@lru_cache(maxsize=200_000)
def plural(word: str) -> str:
    """The plural the original used: TextBlob's pattern-based ``pluralize`` of the word's first token.

    The original took ``TextBlob(word).words.pluralize()[0]``; TextBlob splits words with NLTK's word
    tokenizer, which cuts a few contractions ("cannot" -> "can", "not"), so the plural of "cannot" is
    "cans". The same tokenizer and pluraliser are used here, without the sentence splitter (which needs a
    corpus download and splits nothing in one word).
    """
    from nltk.tokenize import NLTKWordTokenizer
    from textblob import Word

    tokens = NLTKWordTokenizer().tokenize(word)
    # TextBlob's `words` drops punctuation tokens and strips punctuation around the others.
    words = [t if t.startswith("'") else t.strip(string.punctuation) for t in tokens]
    words = [w for w in words if w]
    if not words:
        raise ValueError(f"target word {word!r} has no word in it")
    return str(Word(words[0]).pluralize())


@lru_cache(maxsize=200_000)
def original_forms(target_word: str) -> tuple[str, ...]:
    """The strings whose presence counts as saying ``target_word`` under the original rule."""
    word = target_word.lower()
    forms = [word, word + "ing", word + "ed", plural(word)]
    return tuple(forms + [quote.format(form) for quote in _QUOTED for form in forms])


@lru_cache(maxsize=200_000)
def _right_guess(target_word: str) -> re.Pattern:
    forms = "|".join(re.escape(form) for form in original_forms(target_word))
    return re.compile(GUESS_WINDOW + "(?:" + forms + ")")


def says_word_original(text: str, target_word: str) -> bool:
    """True when a form of ``target_word`` occurs anywhere in the lower-cased ``text``."""
    low = text.lower()
    return any(form in low for form in original_forms(target_word))


def guesses_original(text: str) -> bool:
    """True when the lower-cased ``text`` has the original's guess window."""
    return _GUESS.search(text.lower()) is not None


def right_guess_original(text: str, target_word: str) -> bool:
    """True when some guess window in the lower-cased ``text`` is followed by a form of ``target_word``."""
    return _right_guess(target_word).search(text.lower()) is not None


def judge_original(target_word: str, history: Sequence[Mapping[str, str]], max_turns: int):
    """The original's verdict on a game, as a :class:`spag.game.base.Verdict`."""
    considered = 0
    for utterance in history:
        considered += 1
        role, content = utterance["role"], utterance["content"]
        if role == DEFENDER:
            if guesses_original(content):
                if right_guess_original(content, target_word):
                    return verdict(DEFENDER_WINS, considered, CORRECT_GUESS)
                return verdict(ATTACKER_WINS, considered, WRONG_GUESS)
            if says_word_original(content, target_word):
                return verdict(ATTACKER_WINS, considered, DEFENDER_SAID_WORD)
        elif role == ATTACKER:
            if says_word_original(content, target_word):
                return verdict(ATTACKER_BREAKS_RULES, considered, ATTACKER_SAID_WORD)
            if guesses_original(content):
                return verdict(ATTACKER_BREAKS_RULES, considered, ATTACKER_GUESSED)
        else:
            raise ValueError(f"unknown role {role!r} in utterance {considered - 1}")
        if considered >= 2 * max_turns:
            break
    return verdict(TIE, considered, OUT_OF_TURNS)
