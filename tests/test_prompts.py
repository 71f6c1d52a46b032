"""Prompts: the attacker knows the word, the defender never does, and rendering follows the tokenizer."""

import random

import pytest

from spag.game.prompts import (
    PLAY_TEMPLATE,
    PLAIN_REPLY_PREFIX,
    TRAINING_TEMPLATES,
    Template,
    build_prompt,
    next_role,
    to_model_input,
    training_prompt,
)
from spag.testing import build_tiny_tokenizer

HISTORY = [
    {"role": "attacker", "content": "What grows on trees in autumn orchards?"},
    {"role": "defender", "content": "Leaves change colour, and fruit ripens."},
]


@pytest.mark.parametrize("template", (PLAY_TEMPLATE, *TRAINING_TEMPLATES))
def test_attacker_prompt_carries_the_target_and_defender_prompt_never_does(template):
    attacker = build_prompt("attacker", "orchardist", HISTORY, 5, template)
    defender = build_prompt("defender", "orchardist", HISTORY, 5, template)
    assert "orchardist" in attacker
    assert "orchardist" not in defender


def test_prompt_shows_history_and_round():
    text = build_prompt("attacker", "apple", HISTORY, 5)
    assert HISTORY[0]["content"] in text and HISTORY[1]["content"] in text
    assert "round 2 of 5" in text
    assert "has not started" in build_prompt("attacker", "apple", [], 5)


def test_defender_is_told_to_guess_in_the_last_round():
    last = build_prompt("defender", "apple", HISTORY + [HISTORY[0]], 2)
    assert "last round" in last
    assert "last round" not in build_prompt("defender", "apple", [HISTORY[0]], 2)


def test_examples_are_optional():
    with_examples = build_prompt("defender", "apple", [], 5, Template(PLAY_TEMPLATE.rules, examples=True))
    assert "Example" in with_examples
    assert "Example" not in build_prompt("defender", "apple", [], 5)


def test_training_templates_vary_and_are_seeded():
    prompts = {training_prompt("attacker", "apple", HISTORY, 5, random.Random(s)) for s in range(40)}
    assert len(prompts) > 4
    again = [training_prompt("attacker", "apple", HISTORY, 5, random.Random(7)) for _ in range(2)]
    assert again[0] == again[1]


def test_unknown_role_is_rejected():
    with pytest.raises(ValueError):
        build_prompt("referee", "apple", [], 5)


def test_rendering_uses_chat_template_when_present_and_plain_text_otherwise():
    chat = build_tiny_tokenizer(chat_template=True)
    plain = build_tiny_tokenizer(chat_template=False)
    user = build_prompt("defender", "apple", HISTORY, 5)
    rendered = to_model_input(chat, user)
    assert rendered.startswith("<|start|>user\n") and rendered.endswith("<|start|>assistant\n")
    assert user in rendered
    rendered_plain = to_model_input(plain, user)
    assert rendered_plain.endswith(PLAIN_REPLY_PREFIX) and user in rendered_plain
    assert to_model_input(None, user) == rendered_plain


def test_attacker_speaks_first_and_roles_alternate():
    assert next_role([]) == "attacker"
    assert next_role(HISTORY[:1]) == "defender"
    assert next_role(HISTORY) == "attacker"
