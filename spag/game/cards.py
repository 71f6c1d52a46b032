"""Every game's card (:class:`~spag.game.base.GameCard`), by ``game.name``: what validating the settings and
choosing the targets need, without the code that plays the games (:mod:`spag.game.registry` has that).

A game is a package under ``spag/game/`` with a ``card.py`` and a :class:`~spag.game.base.Game` subclass; to
add one, add its card here and its class to :data:`spag.game.registry.GAMES`.
"""

from __future__ import annotations

from spag.game.base import GameCard
from spag.game.kuhn.card import KUHN
from spag.game.taboo.card import TABOO

CARDS: dict[str, GameCard] = {card.name: card for card in (TABOO, KUHN)}
DEFAULT_GAME = TABOO.name  # a params file without game.name, and an episode that does not name its game
GAME_CHOICES = ", ".join(f"{name} ({card.title})" for name, card in CARDS.items())

# Every game's ``name`` setting lists every game there is, wherever its help is shown (`spag config show`).
for _card in CARDS.values():
    _card.Settings.model_fields["name"].description = f"The game: {GAME_CHOICES}."


def game_card(name: str) -> GameCard:
    """The card of the game registered as ``name``; ValueError naming the games there are."""
    try:
        return CARDS[name]
    except KeyError:
        raise ValueError(f"unknown game {name!r} (one of {', '.join(CARDS)})") from None
