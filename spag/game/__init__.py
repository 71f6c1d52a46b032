"""The games SPAG can play: the :class:`~spag.game.base.Game` interface (:mod:`spag.game.base`), one package
per game (Adversarial Taboo: :mod:`spag.game.taboo`; Kuhn poker: :mod:`spag.game.kuhn`), the registry that
a params file's ``game.name`` picks from (:mod:`spag.game.registry`), each game's card, what validating its
settings needs without its play (:mod:`spag.game.cards`, ``NAME/card.py``), each game's targets
(:mod:`spag.game.targets`), the episode record, the same for every game (:mod:`spag.game.episodes`), and the
target words (:mod:`spag.game.words`).

The judge in a game is the only place that decides who won. May import :mod:`spag.players` (the player
interface a game's strategies wrap), :mod:`spag.models`, :mod:`spag.schema` and :mod:`spag.runtime`.
"""
