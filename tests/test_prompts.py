"""Prompts: the attacker knows the word, the defender never does, and rendering follows the tokenizer."""

import hashlib
import random

import pytest

from spag.game.taboo.prompts import (
    PLAY_TEMPLATE,
    TRAINING_TEMPLATES,
    Template,
    build_prompt,
    default_templates_path,
    load_templates,
    next_role,
    play_template,
    training_prompt,
    training_templates,
)
from spag.models.chat import PLAIN_REPLY_PREFIX, to_model_input
from spag.runtime.errors import DataError
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


# ------------------------------------------------------------------------------ templates as a file

# sha256 of the prompts below as the templates were built in Python before they became templates.yaml:
# the shipped file must keep every default prompt byte for byte.
DEFAULT_PROMPTS_SHA256 = "bdd2605c0b9d82d5d1f23ccda364360f899ab7ae3ed4ddfbb8d266c59b4b70c9"
LINES = [
    {"role": "attacker" if i % 2 == 0 else "defender", "content": f'line {i} with {{braces}} and "quotes"'}
    for i in range(6)
]


def test_shipped_templates_give_the_same_prompts_as_before_byte_for_byte():
    digest = hashlib.sha256()
    play = [PLAY_TEMPLATE, Template(PLAY_TEMPLATE.rules, PLAY_TEMPLATE.layout, examples=True)]
    for template in [*play, *TRAINING_TEMPLATES]:
        for max_turns in (1, 3, 5):
            for n in range(6):
                digest.update(
                    build_prompt(next_role(LINES[:n]), "orchard", LINES[:n], max_turns, template).encode()
                )
    for seed in range(30):
        rng = random.Random(seed)
        digest.update(training_prompt("attacker", "apple", LINES[:2], 5, rng).encode())
        digest.update(training_prompt("defender", "apple", LINES[:3], 5, rng).encode())
    assert digest.hexdigest() == DEFAULT_PROMPTS_SHA256
    assert load_templates().source == str(default_templates_path())
    assert len(TRAINING_TEMPLATES) == 12


ORIGINAL_LIKE = """
separator: ""
parts: [rules, history, instruction]
rules:
  play: "Play Adversarial Taboo for {max_turns} turns.\\n"
  training: [play, "Taboo, {max_turns} rounds.\\n"]
instruction:
  attacker: "\\n\\n### Instruction: You are the attacker. The target word is `{target_word}`.\\n\\n### Response:"
  defender: "\\n\\n### Instruction: Your are the defender.\\n\\n### Response:"
examples: {attacker: "", defender: ""}
history:
  empty: "The game is just initialized."
  header: "\\n### Game History:"
  separator: ""
  play_layout: dash
  training_layouts: [dash, qa]
  layouts:
    dash: "\\n  - {role}: {content}"
    qa: "\\n{speaker}: {content}"
  speakers: {self: "A", other: "Q"}
turn: {attacker: "", defender: ""}
last_round: {attacker: "", defender: ""}
"""


def test_a_templates_file_gives_play_and_training_prompts(tmp_path):
    path = tmp_path / "original.yaml"
    path.write_text(ORIGINAL_LIKE)
    template = play_template(path)
    assert build_prompt("attacker", "apple", [], 5, template) == (
        "Play Adversarial Taboo for 5 turns.\nThe game is just initialized.\n\n### Instruction: You are the "
        "attacker. The target word is `apple`.\n\n### Response:"
    )
    assert build_prompt("defender", "apple", LINES[:1], 5, template) == (
        "Play Adversarial Taboo for 5 turns.\n\n### Game History:\n  - attacker: line 0 with {braces} and "
        '"quotes"\n\n### Instruction: Your are the defender.\n\n### Response:'
    )
    assert len(training_templates(path)) == 4
    drawn = {
        training_prompt("defender", "apple", LINES[:1], 5, random.Random(s), templates=path)
        for s in range(40)
    }
    assert len(drawn) == 4
    assert any("\nQ: line 0" in p and p.startswith("Taboo, 5 rounds.") for p in drawn)


@pytest.mark.parametrize(
    "change, message",
    [
        (("parts: [rules, history, instruction]", "parts: [rules, story]"), "parts: unknown part 'story'"),
        (
            ('defender: "\\n\\n### Instruction: Your are the defender.', 'defender: "{target_word}'),
            "instruction.defender: unknown placeholder {target_word}",
        ),
        (
            (
                'attacker: "\\n\\n### Instruction: You are the attacker. The target word is `{target_word}`.',
                'attacker: "{target_word.__class__.__mro__}',
            ),
            "placeholder {target_word.__class__.__mro__} reaches into",
        ),
        (("play_layout: dash", "play_layout: table"), "history: layout 'table' is not among history.layouts"),
        (('  speakers: {self: "A", other: "Q"}\n', ""), "history.speakers: missing"),
        (("turn: {", "turns: {"), "turns: unknown key"),
    ],
)
def test_a_bad_templates_file_is_named_with_its_key(tmp_path, change, message):
    path = tmp_path / "bad.yaml"
    assert change[0] in ORIGINAL_LIKE
    path.write_text(ORIGINAL_LIKE.replace(*change))
    with pytest.raises(DataError) as caught:
        load_templates(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
    assert (
        "\n" not in str(caught.value) and str(caught.value).count(str(path)) == 1
    )  # said once, not re-wrapped


def test_a_missing_templates_file_is_named(tmp_path):
    with pytest.raises(DataError, match="nowhere.yaml: no such file"):
        load_templates(tmp_path / "nowhere.yaml")


def test_history_bounds_delimit_each_line_in_every_template_and_dropping_keeps_the_rest():
    from spag.game.taboo.prompts import build_prompt_with_bounds
    from spag.rewards.rows import drop_history_lines

    for template in TRAINING_TEMPLATES:
        for role in ("attacker", "defender"):
            text, bounds = build_prompt_with_bounds(role, "orchardist", HISTORY, 5, template)
            assert text == build_prompt(role, "orchardist", HISTORY, 5, template)
            assert len(bounds) == len(HISTORY) + 1
            for i, utterance in enumerate(HISTORY):
                assert text[bounds[i] : bounds[i + 1]].rstrip("\n").endswith(utterance["content"])
            for k in range(len(HISTORY) + 1):
                shorter = drop_history_lines(text, bounds, k)
                assert all(u["content"] not in shorter for u in HISTORY[:k])
                assert all(u["content"] in shorter for u in HISTORY[k:])
                assert shorter.startswith(text[: bounds[0]])  # rules, instruction (target word), header
                assert shorter.endswith(text[bounds[-1] :])  # the turn line
            assert build_prompt_with_bounds(role, "orchardist", [], 5, template)[1] == []
