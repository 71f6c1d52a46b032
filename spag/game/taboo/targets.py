"""Adversarial Taboo's targets: English words, a list file's first ``words.top`` in order, or wordfreq's most
frequent (stage ``words``, through :mod:`spag.game.targets`)."""

from __future__ import annotations

from spag.game.words import top_words, words_from_file


def targets(words) -> list[str]:
    """The targets the ``words:`` section names."""
    if words.source:
        return words_from_file(
            words.source, words.top, nouns_only=words.nouns_only, skip_stop_words=words.skip_stop_words
        )
    return top_words(words.top, nouns_only=words.nouns_only, skip_stop_words=words.skip_stop_words)
