"""The registry of games: a params file picks one by ``game.name``.

A game is a package under ``spag/game/`` with one :class:`~spag.game.base.Game` subclass (read
:mod:`spag.game.base` first) and its card (:mod:`spag.game.cards`); to add one, write that package and add
it to :data:`GAMES` below and to the cards. Every other part of spag reaches the game through the interface.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache

from pydantic import ValidationError

from spag.game.base import Game, GameSettings
from spag.game.cards import CARDS, DEFAULT_GAME, GAME_CHOICES
from spag.game.kuhn import KuhnPoker
from spag.game.taboo import Taboo

GAMES: dict[str, type[Game]] = {game.name: game for game in (Taboo, KuhnPoker)}
__all__ = ["CARDS", "DEFAULT_GAME", "GAMES", "GAME_CHOICES", "episode_game", "game_class", "make_game"]


def game_class(name: str) -> type[Game]:
    """The game registered as ``name``; ValueError naming the games there are."""
    try:
        return GAMES[name]
    except KeyError:
        raise ValueError(f"unknown game {name!r} (one of {', '.join(GAMES)})") from None


def make_game(settings: GameSettings) -> Game:
    """The game of a validated ``game:`` section."""
    return game_class(settings.name)(settings)


def episode_game(episode: Mapping, default: Game | None = None) -> Game:
    """The game an episode was played in, with the settings it recorded (``game``, ``game_settings``); an
    episode that records none (the original project's, an older file) is ``default``'s, or Adversarial
    Taboo's with its default settings."""
    name, recorded = episode.get("game"), episode.get("game_settings")
    if not name or (default is not None and default.name == name and not recorded):
        return default if default is not None else _recorded_game(DEFAULT_GAME, None)
    return _recorded_game(name, recorded or None)


@lru_cache(maxsize=64)
def _recorded_game(name: str, recorded: str | None) -> Game:
    """The game ``name`` with the settings an episode recorded (ValueError in one line naming the first
    setting that is not one of the game's, or JSON that is not an object)."""
    cls = game_class(name)
    if not recorded:
        return cls(None)
    try:
        values = json.loads(recorded)
    except ValueError:
        raise ValueError("'game_settings' is not JSON") from None
    try:
        return cls(cls.Settings.model_validate(values))
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "game_settings"
        raise ValueError(f"'game_settings': {key}: {first['msg']}, got {first.get('input')!r}") from None
