"""Each game's targets, by ``game.name``: what stage ``words`` draws from, without the code that plays the
games (Adversarial Taboo: English words; Kuhn poker: its six deals).
"""

from __future__ import annotations

from collections.abc import Callable

from spag.game.kuhn import card as kuhn
from spag.game.taboo import card as taboo
from spag.game.taboo import targets as taboo_targets

TARGETS: dict[str, Callable[..., list[str]]] = {
    taboo.TABOO.name: taboo_targets.targets,
    kuhn.KUHN.name: kuhn.targets,
}
