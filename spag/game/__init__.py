"""Adversarial Taboo: the rules (judge), prompts, and the episode format."""

from spag.game.rules import (
    ATTACKER,
    ATTACKER_BREAKS_RULES,
    ATTACKER_WINS,
    DECISIVE,
    DEFENDER,
    DEFENDER_WINS,
    OUTCOMES,
    PREDICTION_PHRASE,
    ROLES,
    TIE,
    Verdict,
    is_form_of,
    judge,
    judge_episode,
    parse_prediction,
    says_word,
    word_forms,
)

__all__ = [
    "ATTACKER", "ATTACKER_BREAKS_RULES", "ATTACKER_WINS", "DECISIVE", "DEFENDER", "DEFENDER_WINS",
    "OUTCOMES", "PREDICTION_PHRASE", "ROLES", "TIE", "Verdict", "is_form_of", "judge", "judge_episode",
    "parse_prediction", "says_word", "word_forms",
]
