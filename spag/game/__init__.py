"""The games SPAG can play: the :class:`~spag.game.base.Game` interface (:mod:`spag.game.base`), one package
per game (Adversarial Taboo: :mod:`spag.game.taboo`), and the registry that a params file's ``game.name``
picks from (:mod:`spag.game.registry`). The episode record, the same for every game, is
:mod:`spag.game.episodes`.
"""
