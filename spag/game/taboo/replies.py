"""What of a model's reply is an utterance in Adversarial Taboo: where a reply ends, and what is cleaned off.

A small model tends to write around its message: a role prefix ("Attacker: ..."), a chat-template marker,
or the other player's next line. The game stops a reply where another speaker's line starts (literal stop
strings and a regex, :data:`STOPS`, which every player backend takes) and cleans what is left
(:func:`clean_reply`). With ``game.replies: raw`` neither happens, as in the original's play.
"""

from __future__ import annotations

import re

from spag.game.base import Stops

# Lines where a model starts writing the next speaker's part. Literal strings for backends that only
# take literal stops (OpenAI allows four); the regex below catches the rest when the reply is cleaned.
STOP_STRINGS = ("\nattacker:", "\ndefender:", "\nAttacker:", "\nDefender:")

_SPEAKERS = r"attacker|defender|you|other player|user|assistant|system|human|ai"
_NEXT_SPEAKER_RE = re.compile(
    r"(?i)\n[ \t]*(?:\d+\.[ \t]*)?[\[(*_]*(?:" + _SPEAKERS + r")[\])*_]*[ \t]*[:\]]"
)
_ROLE_PREFIX_RE = re.compile(
    r"^\s*(?:\d+\.\s*)?[\[(*_]*(?:" + _SPEAKERS + r"|me)[\])*_]*\s*[:\]][\])*_]*\s*", re.IGNORECASE
)
# The same speakers as literal stop strings, for engines that stop only on literal text (vLLM): a reply
# that starts another speaker's line ends there instead of running on to max_new_tokens. The regex above
# still cuts what these miss ("\n**Defender:**"), as the hf backend's does after its own stop check.
NEXT_SPEAKER_STOPS = tuple(
    dict.fromkeys(
        f"\n{form}:" for name in _SPEAKERS.split("|") for form in (name, name.capitalize(), name.upper())
    )
)
# What a clean-replies game gives every player: the four role stops first (a backend that takes few literal
# stops, as OpenAI's four, takes those), then the other speakers', and the regex for the rest.
STOPS = Stops(tuple(dict.fromkeys([*STOP_STRINGS, *NEXT_SPEAKER_STOPS])), _NEXT_SPEAKER_RE.pattern)
_CHAT_MARKERS_RE = re.compile(r"<\|im_(?:start|end)\|>|<\|(?:start|end)\|>|</?s>")


def cut_at_next_speaker(text: str) -> tuple[str, bool]:
    """``text`` up to where it starts another speaker's line, and whether it was cut."""
    match = _NEXT_SPEAKER_RE.search(text)
    if match is None:
        return text, False
    return text[: match.start()], True


def clean_reply(text: str) -> str:
    """The utterance a reply stands for: no chat markers, no invented role prefix, no other player's line.

    ``"Attacker: Think of fruit.\\nDefender: Apple?"`` becomes ``"Think of fruit."``.
    """
    marker = _CHAT_MARKERS_RE.search(text)
    if marker is not None:  # a chat-template marker means the turn ended there
        text = text[: marker.start()]
    text = text.strip()
    # A model may open with one or more role labels ("Attacker: You: ..."); drop them all.
    while True:
        stripped = _ROLE_PREFIX_RE.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text, _ = cut_at_next_speaker(text)
    return text.strip()
