"""The rules of Adversarial Taboo: the one place that decides who won.

Play, rewards, evaluation and analysis all call :func:`judge`; nothing else re-implements a rule.

A target word counts as *said* when the word or any inflected form of it stands in an utterance as a
whole word, whatever its case and whatever punctuation, quotes, hyphens or possessive 's surround it.
A longer word that merely contains it ("category" for "cat") does not count.

That is the default rule set, ``whole-word``. ``original`` is the original project's looser rule
(substrings, a fixed guess window), kept in :mod:`spag.game.original` for numbers comparable with the
paper's; every caller picks one with the ``rules`` argument of :func:`judge`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache, lru_cache

from spag.game.taboo.card import RULE_SETS, WHOLE_WORD
from spag.game.taboo.original import judge_original
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
    Verdict,
    verdict,
)

PREDICTION_PHRASE = "I know the word! It is"


# A letter in any script; digits and underscores are not letters, so "cat2" still says "cat".
_LETTER = r"[^\W\d_]"
_QUOTES = "\"'`“”‘’«»*_"

# "i know the word" opens a prediction; everything after it up to the guessed word is tolerated
# (punctuation, "it is" / "it's", quotes), and only the first word after it is the guess.
_PREDICTION_RE = re.compile(
    r"i\s+know\s+the\s+word\b"
    r"(?P<tail>[\s!.,:;\-–—" + re.escape(_QUOTES) + r"]*"
    r"(?:(?:it\s+is|it['’]s|it\s+must\s+be|the\s+word\s+is)\b)?"
    r"[\s:,\-–—" + re.escape(_QUOTES) + r"]*"
    r"(?:(?:a|an|the)\s+(?=" + _LETTER + r"))?"
    r"[" + re.escape(_QUOTES) + r"]*)"
    r"(?P<guess>" + _LETTER + r"+(?:['’\-]" + _LETTER + r"+)*)?",
    re.IGNORECASE,
)


# ---------------------------------------------------------------------------------------------- forms


def _regular_forms(word: str) -> set[str]:
    """Regular English inflections, for words the morphology lexicon does not know."""
    forms = {word, word + "s", word + "es", word + "ed", word + "ing", word + "er", word + "est", word + "'s"}
    if word.endswith("e"):
        stem = word[:-1]
        forms |= {word + "d", word + "r", word + "st", stem + "ing"}
    if word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        stem = word[:-1]
        forms |= {stem + "ies", stem + "ied", stem + "ier", stem + "iest"}
    if len(word) >= 3 and word[-1] not in "aeiouwxy" and word[-2] in "aeiou" and word[-3] not in "aeiou":
        doubled = word + word[-1]
        forms |= {doubled + "ed", doubled + "ing", doubled + "er", doubled + "est"}
    return forms


@cache
def _lexicon():
    import lemminflect

    return lemminflect


@lru_cache(maxsize=200_000)
def word_forms(word: str) -> frozenset[str]:
    """Every form that counts as saying ``word``: itself, its inflections, and those of its lemmas.

    Uses lemminflect's lexicon (plurals, verb tenses and participles, comparatives and superlatives);
    regular suffixes stand in for words the lexicon does not know.
    """
    base = normalise_word(word)
    if not base:
        return frozenset()
    lex = _lexicon()
    forms: set[str] = {base}
    lemmas = {lemma for group in lex.getAllLemmas(base).values() for lemma in group}
    known = False
    for stem in {base, *lemmas}:
        inflections = lex.getAllInflections(stem)
        if inflections:
            known = True
        forms.add(stem)
        forms.update(form for group in inflections.values() for form in group)
    if not known:
        forms |= _regular_forms(base)
    return frozenset(f.lower() for f in forms if f)


def normalise_word(word: str) -> str:
    """Lower-case a word and drop surrounding quotes and punctuation: ``"`Apple!`"`` -> ``apple``."""
    return word.strip().strip(_QUOTES + ".,!?;:()[]{}<>").lower()


class _WordMatcher:
    """A target word's forms, compiled once: a cheap substring screen, then the whole-word regex."""

    __slots__ = ("pattern", "screens")

    def __init__(self, word: str):
        forms = sorted(word_forms(word), key=len, reverse=True)
        # Any whole-word hit contains one of these lower-case pieces (text before an apostrophe).
        self.screens = tuple(sorted({f.split("'")[0] for f in forms if f.split("'")[0]}))
        alternatives = "|".join(re.escape(f).replace("'", "['’]") for f in forms) or r"(?!)"
        self.pattern = re.compile(rf"(?<!{_LETTER})(?:{alternatives})(?!{_LETTER})", re.IGNORECASE)

    def said_in(self, text: str, lowered: str | None = None) -> bool:
        low = text.lower() if lowered is None else lowered
        if not any(piece in low for piece in self.screens):
            return False
        return self.pattern.search(text) is not None


@lru_cache(maxsize=200_000)
def _matcher(word: str) -> _WordMatcher:
    return _WordMatcher(word)


def says_word(text: str, target_word: str) -> bool:
    """True when ``text`` says ``target_word`` or any of its forms as a whole word."""
    return _matcher(normalise_word(target_word)).said_in(text)


def blank_word(text: str, target_word: str, blank: str) -> str:
    """``text`` with every whole-word form of ``target_word`` that :func:`says_word` sees replaced by ``blank``."""
    return _matcher(normalise_word(target_word)).pattern.sub(blank, text)


def is_form_of(candidate: str, target_word: str) -> bool:
    """True when ``candidate`` is the target word or one of its inflected forms."""
    guess = normalise_word(candidate)
    if guess.endswith(("'s", "’s")):
        guess = guess[:-2]
    return guess in word_forms(normalise_word(target_word))


# ------------------------------------------------------------------------------------------ prediction


def uses_prediction_phrase(text: str, lowered: str | None = None) -> bool:
    low = text.lower() if lowered is None else lowered
    return "know" in low and _PREDICTION_RE.search(text) is not None


def parse_prediction(text: str, lowered: str | None = None) -> str | None:
    """The defender's guessed word, ``""`` for a prediction phrase with no word after it, or None.

    Only the first prediction and its first word count.
    """
    low = text.lower() if lowered is None else lowered
    if "know" not in low:
        return None
    match = _PREDICTION_RE.search(text)
    if match is None:
        return None
    return (match.group("guess") or "").lower()


# ----------------------------------------------------------------------------------------------- judge


def check_rules(rules: str) -> str:
    if rules not in RULE_SETS:
        raise ValueError(f"unknown rules {rules!r}; expected one of {', '.join(RULE_SETS)}")
    return rules


def judge(
    target_word: str, history: Sequence[Mapping[str, str]], max_turns: int, rules: str = WHOLE_WORD
) -> Verdict:
    """Walk the history in order and decide the game by ``rules`` (``whole-word`` or ``original``).

    At most ``2 * max_turns`` utterances are considered; later ones are ignored. Raises ValueError for
    an utterance whose role is neither attacker nor defender.
    """
    if rules != WHOLE_WORD:
        check_rules(rules)
        return judge_original(target_word, history, max_turns)
    limit = 2 * max_turns
    considered = 0
    matcher = _matcher(normalise_word(target_word))
    for utterance in history[:limit]:
        considered += 1
        role, content = utterance["role"], utterance["content"]
        low = content.lower()
        if role == ATTACKER:
            if matcher.said_in(content, low):
                return verdict(ATTACKER_BREAKS_RULES, considered, ATTACKER_SAID_WORD)
            if uses_prediction_phrase(content, low):
                return verdict(ATTACKER_BREAKS_RULES, considered, ATTACKER_GUESSED)
        elif role == DEFENDER:
            guess = parse_prediction(content, low)
            if guess is not None:
                if guess != "" and is_form_of(guess, target_word):
                    return verdict(DEFENDER_WINS, considered, CORRECT_GUESS)
                return verdict(ATTACKER_WINS, considered, WRONG_GUESS)
            if matcher.said_in(content, low):
                return verdict(ATTACKER_WINS, considered, DEFENDER_SAID_WORD)
        else:
            raise ValueError(f"unknown role {role!r} in utterance {considered - 1}")
    return verdict(TIE, considered, OUT_OF_TURNS)


def judge_episode(episode: Mapping, rules: str = WHOLE_WORD) -> Verdict:
    return judge(episode["target_word"], episode["history"], int(episode["max_turns"]), rules)
