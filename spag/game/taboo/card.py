"""What the pipeline knows of Adversarial Taboo without playing it: its settings (the ``game:`` section), its
teacher's strategy knobs (``teacher.strategies``), its baselines' names and its targets.

The settings are validated, and the targets chosen (stage ``words``), from this module alone, so that the
code that plays the game (prompts, templates, judge) is not a dependency of the stages that never play it
(:mod:`spag.pipeline.dvcyaml`).
"""

from __future__ import annotations

from typing import Literal

from spag.game.base import GameCard, GameSettings
from spag.schema import PathStr, Section, knob

WHOLE_WORD = "whole-word"
ORIGINAL = "original"
RULE_SETS = (WHOLE_WORD, ORIGINAL)
PROMPT_STYLES = ("templates", "original")
REPLY_HANDLING = ("clean", "raw")
GAME_ENDS = ("decided", "guess-phrase")
# The no-training baselines (spag.game.taboo.baselines builds them).
BASELINE_NAMES = ("imitation-resample", "imitation-filter", "imitation-filter-guess", "base-teacher")


class TabooSettings(GameSettings):
    """Adversarial Taboo's settings (the ``game:`` section)."""

    name: Literal["taboo"] = knob("taboo", "The game (the registry lists every one).")
    rules: Literal[RULE_SETS] = knob(
        WHOLE_WORD,
        "The judge: whole-word (whole words, every inflection) or "
        "original (the original code's substring rule).",
    )
    templates: PathStr | None = knob(
        None, "Prompt templates file (format: spag/game/taboo/templates.yaml); null: the shipped templates."
    )
    play_prompts: Literal[PROMPT_STYLES] = knob(
        "templates",
        "What a player is asked: templates (the templates file, in the model's chat template) or "
        "original (the original's play prompt, BOS + its text, no chat template).",
    )
    row_prompts: Literal[PROMPT_STYLES] = knob(
        "templates",
        "Training rows' prompts: templates (a rules text and history layout of the templates "
        "file, drawn at random) or original (the original's randomly drawn query formats, the "
        "model's whole input).",
    )
    replies: Literal[REPLY_HANDLING] = knob(
        "clean",
        "clean (a reply ends where the model writes another speaker's line; role labels and chat "
        "markers are removed) or raw (the decoded reply as it is, as the original kept it).",
    )
    end: Literal[GAME_ENDS] = knob(
        "decided",
        "When a game stops: decided (as soon as the judge decides) or guess-phrase (the "
        'original\'s: only after a defender line with "i know the word", else all turns are played '
        "and judged afterwards).",
    )


class TabooStrategies(Section):
    """Which strategies a player uses (``teacher.strategies``; a baseline's own, :class:`WithStrategies`)."""

    examples: bool = knob(False, "Worked examples in the play prompt (weak teachers).")
    foul_retries: int = knob(0, "Resample an attacker line that says the word, up to N times.", ge=0)
    coached_attacker: bool = knob(False, "Attacker lines describe the word, the word blanked out.")
    final_guess: bool = knob(
        False, "(hf) The defender's last line is the vocabulary word the talk makes most likely."
    )
    word_filter: bool = knob(
        False,
        "Decode-time filter: every form of the word left in an attacker line is "
        "blanked out (a baseline's, not a teacher's).",
    )


TABOO = GameCard(
    name="taboo",
    title="Adversarial Taboo",
    Settings=TabooSettings,
    Strategies=TabooStrategies,
    skill=True,
    baselines=BASELINE_NAMES,
)
