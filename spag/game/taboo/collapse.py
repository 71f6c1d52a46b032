"""Adversarial Taboo's collapse figures: how varied each role's replies are in a set of played games.

A self-play loop that has collapsed says the same thing in every game: one clue whatever the word, one
guess, or nothing at all. Per role (attacker, defender), over every utterance of the role:

- ``shares``: ``ROLE_distinct_replies``, distinct replies per reply; ``ROLE_distinct_openings``, distinct
  first utterances of the role per game in which it spoke; ``ROLE_empty``, replies with no text;
  ``ROLE_truncated``, replies cut at ``max_new_tokens`` (among the replies that record it: episodes the play
  engine wrote; None for episodes without the flag, such as imported ones). Two replies are the same when
  they are after case folding and with runs of whitespace made one space.
- ``lengths``: ``ROLE_words_per_reply``, the mean reply length in words (split on whitespace), which any
  episode has, given replies included (the token count, ``mean_reply_tokens``, is the play engine's).
- ``counts``: ``ROLE_replies`` and ``ROLE_games``, the denominators.

A share is None for a role that never spoke.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def _same(text: str) -> str:
    """A reply as the distinct counts compare it."""
    return " ".join(text.split()).casefold()


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def collapse_metrics(episodes: Sequence[Mapping], roles: Sequence[str]) -> dict[str, dict]:
    """The collapse figures of ``episodes`` for each of ``roles`` (see the module docstring)."""
    shares: dict[str, float | None] = {}
    lengths: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for role in roles:
        replies = [u for e in episodes for u in e["history"] if u["role"] == role]
        openings = [
            next(u for u in e["history"] if u["role"] == role)
            for e in episodes
            if any(u["role"] == role for u in e["history"])
        ]
        flagged = [u for u in replies if u.get("truncated") is not None]
        shares[f"{role}_distinct_replies"] = _share(len({_same(u["content"]) for u in replies}), len(replies))
        shares[f"{role}_distinct_openings"] = _share(
            len({_same(u["content"]) for u in openings}), len(openings)
        )
        shares[f"{role}_empty"] = _share(sum(not u["content"].strip() for u in replies), len(replies))
        shares[f"{role}_truncated"] = _share(sum(bool(u["truncated"]) for u in flagged), len(flagged))
        lengths[f"{role}_words_per_reply"] = _share(
            sum(len(u["content"].split()) for u in replies), len(replies)
        )
        counts[f"{role}_replies"], counts[f"{role}_games"] = len(replies), len(openings)
    return {"shares": shares, "lengths": lengths, "counts": counts}
