"""Stage ``words``: the game's targets (Adversarial Taboo: words) and their training / held-out split.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from spag.config import Settings
from spag.game.cards import game_card
from spag.game.targets import TARGETS
from spag.game.words import split_words, write_words
from spag.pipeline.context import Layout, setting_file
from spag.runtime.console import summary
from spag.runtime.errors import DataError


def words(settings: Settings, layout: Layout) -> None:
    """The game's targets (Adversarial Taboo: wordfreq's most frequent words, or a list file's first ``top``
    in order) and their training / held-out split (a game of few targets trains and evaluates on all)."""
    w, game = settings.words, game_card(settings.game.name)
    if w.source:
        setting_file(settings, "words.source")
    try:
        chosen = TARGETS[game.name](w)
    except DataError as exc:
        raise DataError("words.source", None, str(exc)) from None
    train, held = (chosen, chosen) if game.few_targets else split_words(chosen, w.eval_fraction)
    write_words(chosen, layout.words / "all.txt")
    write_words(train, layout.words / "train.txt")
    write_words(held, layout.words / "eval.txt")
    summary(
        "words",
        f"{len(chosen)} {game.name} targets{' from ' + w.source if w.source else ''}: "
        f"{len(train)} training, {len(held)} for evaluation",
    )
