"""The roles and outcomes of Adversarial Taboo, and the verdict a judge returns.

Both judges (:mod:`spag.game.rules`, the default, and :mod:`spag.game.original`) decide a game in these
terms; play, rewards, evaluation and analysis read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

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
DEFENDER_SAID_WORD = "defender_said_word"   # attacker_wins: the attacker led the defender to the word
WRONG_GUESS = "wrong_guess"                 # attacker_wins: the defender guessed, and missed
CORRECT_GUESS = "correct_guess"             # defender_wins
ATTACKER_SAID_WORD = "attacker_said_word"   # attacker_breaks_rules
ATTACKER_GUESSED = "attacker_guessed"       # attacker_breaks_rules: the attacker used the guess phrase
OUT_OF_TURNS = "out_of_turns"               # tie
CAUSES = {ATTACKER_WINS: (DEFENDER_SAID_WORD, WRONG_GUESS), DEFENDER_WINS: (CORRECT_GUESS,),
          ATTACKER_BREAKS_RULES: (ATTACKER_SAID_WORD, ATTACKER_GUESSED), TIE: (OUT_OF_TURNS,)}


@dataclass(frozen=True)
class Verdict:
    """What the judge decided: the outcome, how many utterances it took, and how it came about
    (``cause``, one of ``CAUSES[outcome]``)."""

    outcome: str
    turns: int
    cause: str

    @property
    def decided(self) -> bool:
        return self.outcome != TIE

    @property
    def winner(self) -> str | None:
        return {ATTACKER_WINS: ATTACKER, DEFENDER_WINS: DEFENDER}.get(self.outcome)
