"""The roles and outcomes of Adversarial Taboo, and the verdict a judge returns.

Both judges (:mod:`spag.game.taboo.rules`, the default, and :mod:`spag.game.taboo.original`) decide a
game in these terms; the :class:`~spag.game.taboo.Taboo` game hands them to the rest of spag.
"""

from __future__ import annotations

from spag.game.base import Verdict

ATTACKER = "attacker"
DEFENDER = "defender"
ROLES = (ATTACKER, DEFENDER)

ATTACKER_WINS = "attacker_wins"
DEFENDER_WINS = "defender_wins"
TIE = "tie"
ATTACKER_BREAKS_RULES = "attacker_breaks_rules"
OUTCOMES = (ATTACKER_WINS, DEFENDER_WINS, TIE, ATTACKER_BREAKS_RULES)
DECISIVE = (ATTACKER_WINS, DEFENDER_WINS)

# How a game ended, finer than its outcome: the outcome decomposition of an evaluation counts these.
DEFENDER_SAID_WORD = "defender_said_word"  # attacker_wins: the attacker led the defender to the word
WRONG_GUESS = "wrong_guess"  # attacker_wins: the defender guessed, and missed
CORRECT_GUESS = "correct_guess"  # defender_wins
ATTACKER_SAID_WORD = "attacker_said_word"  # attacker_breaks_rules
ATTACKER_GUESSED = "attacker_guessed"  # attacker_breaks_rules: the attacker used the guess phrase
OUT_OF_TURNS = "out_of_turns"  # tie
CAUSES = {
    ATTACKER_WINS: (DEFENDER_SAID_WORD, WRONG_GUESS),
    DEFENDER_WINS: (CORRECT_GUESS,),
    ATTACKER_BREAKS_RULES: (ATTACKER_SAID_WORD, ATTACKER_GUESSED),
    TIE: (OUT_OF_TURNS,),
}


# Who won and who broke the rules, by outcome: a foul names no winner (nobody's lines are rewarded), and
# in evaluation it is the defender's win.
SIDES = {
    ATTACKER_WINS: (ATTACKER, None),
    DEFENDER_WINS: (DEFENDER, None),
    TIE: (None, None),
    ATTACKER_BREAKS_RULES: (None, ATTACKER),
}


def verdict(outcome: str, turns: int, cause: str) -> Verdict:
    """The judge's :class:`~spag.game.base.Verdict` of an outcome, with its winner and offender."""
    winner, offender = SIDES[outcome]
    return Verdict(outcome, turns, cause, winner, offender)
