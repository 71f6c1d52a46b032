"""The game a stage plays (:func:`stage_game`) and its seeded sample of targets (:func:`sample_words`): only
the stages that play, reward or evaluate import this, so the code of the games is a dependency of those
stages and not of the others (``base_model``, ``words``, ``benchmark_data``).
"""

from __future__ import annotations

from pathlib import Path

from spag.game.base import Game
from spag.game.registry import make_game
from spag.game.words import read_words, sample_targets
from spag.pipeline.context import Declared
from spag.runtime.errors import ParamsError, SettingError


def stage_game(settings: Declared) -> Game:
    """The game of the ``game`` section; a setting the game refuses (a templates file that is not there) is
    a ParamsError naming its key."""
    try:
        return make_game(settings.game)
    except SettingError as exc:
        raise ParamsError("params.yaml", f"game.{exc.key}", exc.message) from None


def sample_words(path: Path, n: int, seed: str, game: Game) -> list[str]:
    """A seeded sample of ``n`` of ``game``'s targets from a target list file (:func:`sample_targets`)."""
    return sample_targets(read_words(path), n, seed, repeat=game.few_targets)
