"""The original project's prompts (``game.play_prompts: original``, ``game.row_prompts: original``).

The original code feeds its models plain text, BOS + the text's tokens, with no chat template. Its texts
(eight rules texts, two instruction sets; ``original_prompts.yaml`` beside this module) are put together
in two ways:

- **play** (:func:`play_query`): rules text 0 with ``max_turns``; then ``"The game is just initialized."``
  before the first utterance, else ``"\\n### Game History:"`` and one ``"\\n  - {role}: {content}"`` line
  per utterance; then the next speaker's instruction, ending in ``"\\n\\n### Response:"``.
- **training rows** (:func:`row_query`): every part is drawn at random: one of the eight rules texts, a
  line prefix (seven), a pair of speaker labels (five: the roles, Assistant/Human, Answer/Question,
  Response/Query, A/Q), a system label (three) and a layout (three: chat, chat with the history first,
  alpaca, the last with two 20% branches). :data:`ROW_CHOICES` lists the choices; :func:`row_query` draws
  them in a fixed order from a seeded ``random.Random``, so the same seed gives the same queries.

A query built here is a :class:`~spag.game.prompts.RawPrompt`: it already is the model's whole input.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import yaml

from spag.game.taboo.outcomes import ATTACKER, DEFENDER
from spag.game.taboo.prompts import next_role
from spag.models.chat import RawPrompt

NOT_STARTED = "The game is just initialized."
HISTORY_HEADER = "\n### Game History:"
PLAY_LINE = "\n  - {role}: {content}"

# The random choices of a training row's query, in the order they are drawn.
LINE_PREFIXES = ("\n - ", "\n### ", "\n## ", "\n# ", "\n *** ", "\n **", "\n\n")
SPEAKER_LABELS = (None, ("Assistant", "Human"), ("Answer", "Question"), ("Response", "Query"), ("A", "Q"))
LAYOUTS = ("chat", "chat_inverse", "alpaca")
SYSTEM_LABELS = ("Rules", "Game Rule", "System")
LABELLED_RULES = 0.2  # alpaca layout: the rules text opens with its system label
SHORT_INSTRUCTION = 0.2  # alpaca layout: the instruction ends in ": " instead of a speaker line
ROW_CHOICES = {
    "line_prefix": LINE_PREFIXES,
    "speaker_labels": SPEAKER_LABELS,
    "layout": LAYOUTS,
    "system_label": SYSTEM_LABELS,
}


@lru_cache(maxsize=1)
def texts() -> dict:
    """The original's texts: ``rules`` (a list), ``play_instruction`` and ``row_instruction``."""
    return yaml.safe_load(Path(__file__).with_name("original_prompts.yaml").read_text(encoding="utf-8"))


def play_query(history: Sequence[Mapping[str, str]], target_word: str, max_turns: int) -> RawPrompt:
    """The play prompt of the next speaker after ``history``, as the original's play script built it."""
    t = texts()
    role = next_role(history)
    query = t["rules"][0].format(max_turns=max_turns)
    if history:
        query += HISTORY_HEADER + "".join(
            PLAY_LINE.format(role=u["role"], content=u["content"]) for u in history
        )
    else:
        query += NOT_STARTED
    return RawPrompt(query + t["play_instruction"][role].format(target_word=target_word))


def row_query(
    history: Sequence[Mapping[str, str]], target_word: str, max_turns: int, rng: random.Random
) -> RawPrompt:
    """A training row's query for the next speaker after ``history``, its format drawn by ``rng`` from the
    formats of the original's ``randomly_convert_game_history_to_query``."""
    t = texts()
    role = next_role(history)
    other = DEFENDER if role == ATTACKER else ATTACKER
    prefix = "\n" + rng.choice(LINE_PREFIXES)
    labels = rng.choice(SPEAKER_LABELS) or (role, other)
    label = {role: labels[0], other: labels[1]}  # (the speaker's label, the other's)
    lines = "".join(f"{prefix}{label[u['role']]}: {u['content']}" for u in history)
    layout = rng.choice(LAYOUTS)
    system_label = rng.choice(SYSTEM_LABELS)
    rules = rng.choice(t["rules"]).format(max_turns=max_turns)
    instruction = t["row_instruction"][role].format(target_word=target_word)
    if layout == "alpaca":
        if rng.random() < LABELLED_RULES:
            rules = f"{system_label}: {rules}"
        query = rules + (prefix + "Game History:" + lines + "\n\n" if history else NOT_STARTED + " ")
        if rng.random() < SHORT_INSTRUCTION:
            query += instruction[:-1] + ": "
        else:
            query += instruction + prefix + label[role] + ": "
        return RawPrompt(query)
    system = rules + "\n\n" + instruction + ("" if history else NOT_STARTED + " ")
    system = f"{prefix}{system_label}: {system}"
    body = lines + system if layout == "chat_inverse" else system + lines
    return RawPrompt(body + prefix + label[role] + ": ")
