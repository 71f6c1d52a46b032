"""What each player is told: the rules, its role, and the game so far.

A prompt is built as the text of one user message (:func:`build_prompt`), then turned into model input
by :func:`to_model_input`, which uses the tokenizer's chat template when the model has one and a plain
text layout otherwise. Play and training go through the same two functions, so a trained model sees at
play time exactly the framing it learnt from.

Play uses one fixed template (``PLAY_TEMPLATE``); training rows draw a template at random from
``TRAINING_TEMPLATES`` (paraphrased rules and several history layouts) for variety.

The attacker's prompt carries the target word; the defender's never does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping, Sequence

from spag.game.rules import ATTACKER, DEFENDER, PREDICTION_PHRASE

# ----------------------------------------------------------------------------------------- rule texts

_PLAY_RULES = (
    "We are playing Adversarial Taboo, a word game for two players. The attacker has been given a "
    "secret target word; the defender has not. The attacker's goal is to steer the talk so that the "
    "defender says the target word without realising it, and the attacker must never say the word "
    "himself. The defender's goal is to work out the word from the conversation while avoiding saying "
    "it by accident. Once per game the defender may guess by saying exactly \""
    + PREDICTION_PHRASE
    + " [word]\". A correct guess wins the game for the defender; a wrong guess loses it. The attacker "
    "loses if he says the target word or uses that guessing phrase. If no one has won after {max_turns} "
    "rounds, the game is a draw."
)

_PARAPHRASED_RULES = (
    _PLAY_RULES,
    "Adversarial Taboo is a two-player conversation game. One player, the attacker, secretly holds a "
    "target word. The other, the defender, does not know it. The attacker wins if the defender utters "
    "the target word, and loses at once if he utters it himself or pretends to guess it. The defender "
    "may end the game with a single guess in the form \""
    + PREDICTION_PHRASE
    + " [word]\": right, and the defender wins; wrong, and the attacker wins. After {max_turns} rounds "
    "with no winner the game is tied.",
    "Rules of the game. Two players talk in turns, the attacker speaking first. Only the attacker knows "
    "the hidden target word. Attacker: lead the defender into saying the word, but never say it "
    "yourself. Defender: figure out the word without saying it; when confident, announce \""
    + PREDICTION_PHRASE
    + " [word]\" (one attempt only; a miss loses the game). The game ends in a tie after {max_turns} "
    "rounds.",
    "This is a game of hidden words called Adversarial Taboo. The attacker knows a target word and "
    "tries, through natural conversation, to get the defender to say it. Saying the word, or claiming "
    "to know it, is forbidden for the attacker. The defender tries to infer the word and can make one "
    "guess with the sentence \""
    + PREDICTION_PHRASE
    + " [word]\"; guessing right wins, guessing wrong loses. Up to {max_turns} rounds are played.",
)

_ROLE_INSTRUCTIONS = {
    ATTACKER: (
        "You are the attacker. The target word is \"{target_word}\". Never write this word or any form "
        "of it, and never use the guessing phrase. Talk about something related so that the defender "
        "ends up saying the word."
    ),
    DEFENDER: (
        "You are the defender. You do not know the target word. Reply naturally, avoid saying words "
        "that the attacker seems to be pushing you towards, and when you are fairly sure what the word "
        "is, guess it with \"" + PREDICTION_PHRASE + " [word]\"."
    ),
}

_EXAMPLES = {
    ATTACKER: (
        "Example (target word \"rain\"):\n"
        "attacker: What do you usually take with you when the sky turns grey?\n"
        "defender: An umbrella, in case the weather gets wet."
    ),
    DEFENDER: (
        "Example:\n"
        "attacker: Think of what falls from grey clouds and makes the streets wet.\n"
        "defender: That sounds like drops of water from the sky. " + PREDICTION_PHRASE + " rain"
    ),
}

_TURN_LINE = {
    ATTACKER: "It is your turn (round {round} of {max_turns}). Reply with one short message as the attacker.",
    DEFENDER: (
        "It is your turn (round {round} of {max_turns}). Reply with one short message as the defender."
    ),
}
_LAST_ROUND_HINT = {
    ATTACKER: "",
    DEFENDER: " This is the last round: make your guess now.",
}


# ------------------------------------------------------------------------------------ history layouts


def _layout_lines(history: Sequence[Mapping[str, str]], role: str) -> str:
    return "\n".join(f"{u['role']}: {u['content']}" for u in history)


def _layout_you_other(history: Sequence[Mapping[str, str]], role: str) -> str:
    return "\n".join(
        ("You" if u["role"] == role else "Other player") + f": {u['content']}" for u in history
    )


def _layout_numbered(history: Sequence[Mapping[str, str]], role: str) -> str:
    return "\n".join(f"{i + 1}. [{u['role'].capitalize()}] {u['content']}" for i, u in enumerate(history))


_LAYOUTS = {"lines": _layout_lines, "you_other": _layout_you_other, "numbered": _layout_numbered}


@dataclass(frozen=True)
class Template:
    """One way of presenting the game: a rules text and a history layout."""

    rules: str
    layout: str = "lines"
    examples: bool = False


PLAY_TEMPLATE = Template(rules=_PLAY_RULES, layout="lines")
TRAINING_TEMPLATES = tuple(
    Template(rules=rules, layout=layout) for rules in _PARAPHRASED_RULES for layout in _LAYOUTS
)


def build_prompt(
    role: str,
    target_word: str,
    history: Sequence[Mapping[str, str]],
    max_turns: int,
    template: Template = PLAY_TEMPLATE,
) -> str:
    """The text of the user message that asks ``role`` for its next utterance."""
    if role not in _ROLE_INSTRUCTIONS:
        raise ValueError(f"unknown role {role!r}")
    parts = [template.rules.format(max_turns=max_turns)]
    parts.append(_ROLE_INSTRUCTIONS[role].format(target_word=target_word) if role == ATTACKER
                 else _ROLE_INSTRUCTIONS[role])
    if template.examples:
        parts.append(_EXAMPLES[role])
    if history:
        parts.append("The conversation so far:\n" + _LAYOUTS[template.layout](history, role))
    else:
        parts.append("The conversation has not started yet.")
    game_round = len(history) // 2 + 1
    turn = _TURN_LINE[role].format(round=game_round, max_turns=max_turns)
    if game_round >= max_turns:
        turn += _LAST_ROUND_HINT[role]
    parts.append(turn)
    return "\n\n".join(parts)


def training_prompt(
    role: str,
    target_word: str,
    history: Sequence[Mapping[str, str]],
    max_turns: int,
    rng: random.Random,
) -> str:
    """A prompt for a training row, with a template drawn from ``TRAINING_TEMPLATES`` by ``rng``."""
    return build_prompt(role, target_word, history, max_turns, rng.choice(TRAINING_TEMPLATES))


# ------------------------------------------------------------------------------------------ rendering

PLAIN_USER_PREFIX = "### Instruction:\n"
PLAIN_REPLY_PREFIX = "\n\n### Response:\n"


def has_chat_template(tokenizer) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def to_model_input(tokenizer, user_text: str) -> str:
    """The full model input for one user message, ending where the model's reply starts."""
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
        )
    return PLAIN_USER_PREFIX + user_text + PLAIN_REPLY_PREFIX


def model_input_ids(tokenizer, user_text: str) -> list[int]:
    """Token ids of :func:`to_model_input`: a chat template writes its own begin-of-sequence marker, so
    the tokenizer adds special tokens only to the plain layout (never a second BOS)."""
    text = to_model_input(tokenizer, user_text)
    return tokenizer(text, add_special_tokens=not has_chat_template(tokenizer))["input_ids"]


def next_role(history: Sequence[Mapping[str, str]]) -> str:
    """The attacker speaks first; roles alternate."""
    return ATTACKER if len(history) % 2 == 0 else DEFENDER
