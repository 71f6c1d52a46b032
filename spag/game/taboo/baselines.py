"""Baselines that need no training: what decode-time help alone does for a model that was never self-played.

SPAG's gain over the imitation model could come for free: most of it, at laptop scale, is an attacker
that says the word less often, and a decoder can stop a model from saying a word. Each baseline here is a
model with strategies (:class:`spag.game.taboo.strategies.TabooStrategies`) and no further training, played on the same
evaluation words and seeds as the SPAG epochs; SPAG's gain is stated against the strongest of them.

- ``imitation-resample``: the imitation model; an attacker line that breaks the rules is sampled again
  (up to 4 times);
- ``imitation-filter``: the same, and every form of the word left in an attacker line is blanked out, so
  the attacker never says it;
- ``imitation-filter-guess``: the same, and the defender's last line is the dictionary guess (the word the
  conversation makes most likely, from the game's public vocabulary);
- ``base-teacher``: the base model with the teacher's strategies (coached attacker, foul retries,
  dictionary guess), i.e. the teacher the imitation model learnt from.
"""

from __future__ import annotations

from spag.game.taboo.card import TabooStrategies
from spag.game.taboo.strategies import WithStrategies

IMITATION = "imitation"
BASE = "base"

BASELINES: dict[str, tuple[str, TabooStrategies]] = {
    "imitation-resample": (IMITATION, TabooStrategies(foul_retries=4)),
    "imitation-filter": (IMITATION, TabooStrategies(foul_retries=4, word_filter=True)),
    "imitation-filter-guess": (
        IMITATION,
        TabooStrategies(foul_retries=4, word_filter=True, final_guess=True),
    ),
    "base-teacher": (BASE, TabooStrategies(coached_attacker=True, foul_retries=2, final_guess=True)),
}


# The decode-time filter alone (imitation-filter's strategies), to give any checkpoint: what training adds
# beyond not saying the word is its score with the filter against the filtered imitation model.
FILTER = BASELINES["imitation-filter"][1]


def check_baseline(name: str) -> str:
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
    return name


def baseline_player(name: str, players: dict[str, object]) -> WithStrategies:
    """The baseline ``name`` over the loaded ``players`` (``{"imitation": ..., "base": ...}``)."""
    model, strategies = BASELINES[check_baseline(name)]
    return WithStrategies(players[model], strategies, name=name)
