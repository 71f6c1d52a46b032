"""What each player is told: the rules, its role, and the game so far.

A prompt is built as the text of one user message (:func:`build_prompt`), then turned into model input
by :func:`to_model_input`, which uses the tokenizer's chat template when the model has one and a plain
text layout otherwise. Play and training go through the same two functions, so a trained model sees at
play time exactly the framing it learnt from.

The texts are data: a templates file (``game.templates: FILE``; the shipped one is ``templates.yaml``
beside this module, whose header documents the format) gives the rules, the role instructions, the turn
lines and the history layouts. Play uses one fixed template (:func:`play_template`); training rows draw a
template at random from :func:`training_templates` (paraphrased rules and several history layouts).

The attacker's prompt carries the target word; the defender's never does.
"""

from __future__ import annotations

import os
import random
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from spag.game.taboo.outcomes import ATTACKER, DEFENDER, ROLES
from spag.runtime.errors import DataError, ParamsError
from spag.schema import read_yaml

PART_NAMES = ("rules", "instruction", "examples", "history", "turn")
_ROLE_IN_PROMPT = re.compile(r"\byour?\s+are\s+(?:the\s+|an?\s+)?(attacker|defender)\b", re.IGNORECASE)


def addressed_role(prompt: str) -> str | None:
    """The role a prompt addresses ("You are the attacker ..."), or None where it names none or both."""
    found = {m.group(1).lower() for m in _ROLE_IN_PROMPT.finditer(prompt)}
    return found.pop() if len(found) == 1 else None


_LAYOUT_FIELDS = {"role": "attacker", "Role": "Attacker", "speaker": "You", "number": 1, "content": "hi"}


@dataclass(frozen=True)
class PromptTexts:
    """Every text of a templates file, checked when it is loaded."""

    source: str
    separator: str
    parts: tuple[str, ...]
    play_rules: str
    training_rules: tuple[str, ...]
    instruction: Mapping[str, str]
    examples: Mapping[str, str]
    history_empty: str
    history_header: str
    history_separator: str
    play_layout: str
    training_layouts: tuple[str, ...]
    layouts: Mapping[str, str]
    speakers: Mapping[str, str]
    turn: Mapping[str, str]
    last_round: Mapping[str, str]


def default_templates_path() -> Path:
    return Path(__file__).with_name("templates.yaml")


@lru_cache(maxsize=16)
def load_templates(path: str | os.PathLike | None = None) -> PromptTexts:
    """The prompt texts of a templates file (``None``: the shipped one); a bad file raises DataError."""
    source = str(default_templates_path() if path is None else path)
    try:  # read as a params file is: the same limits, merge keys, a FIFO or device refused
        data = read_yaml(Path(source))
    except ParamsError as exc:
        raise DataError(source, None, str(exc).removeprefix(f"{source}: ")) from None
    return _parse_templates(data, source)


class _TemplatesReader:
    """Reads the sections of one templates file; every complaint names the file and the key."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, message: str):
        raise DataError(self.source, None, f"{key}: {message}")

    def get(self, mapping, key: str, path: str, kind=str):
        if not isinstance(mapping, dict) or key not in mapping:
            self.fail(path, "missing")
        value = mapping[key]
        if not isinstance(value, kind):
            self.fail(
                path, f"expected {'text' if kind is str else kind.__name__}, got {type(value).__name__}"
            )
        return value

    def per_role(self, data, key: str) -> dict[str, str]:
        section = self.get(data, key, key, dict)
        return {role: self.get(section, role, f"{key}.{role}") for role in ROLES}

    def check_format(self, text: str, path: str, **fields):
        fail = self.fail
        try:
            # Plain names only: "{target_word.__class__}" or "{target_word[0]}" would reach into objects.
            for _, name, spec, _ in string.Formatter().parse(text):
                if name is None or (name in fields and "{" not in (spec or "")):
                    continue
                if any(ch in name for ch in ".[") or name in fields:
                    fail(
                        path,
                        f"placeholder {{{name}}} reaches into a value; write plain names "
                        f"({', '.join(fields) or 'none'})",
                    )
                fail(path, f"unknown placeholder {{{name}}}; allowed: {', '.join(fields) or 'none'}")
            text.format(**fields)
        except DataError:
            raise  # fail()'s own error (a ValueError too): already says what is wrong
        except (KeyError, IndexError) as exc:
            fail(path, f"unknown placeholder {{{exc.args[0]}}}; allowed: {', '.join(fields) or 'none'}")
        except ValueError as exc:
            fail(path, f"bad format ({exc}); write literal braces as {{{{ and }}}}")


def _parse_templates(data, source: str) -> PromptTexts:
    read = _TemplatesReader(source)
    if not isinstance(data, dict):
        read.fail("(top)", "expected a mapping of the template sections")
    unknown = set(data) - {
        "separator",
        "parts",
        "rules",
        "instruction",
        "examples",
        "history",
        "turn",
        "last_round",
    }
    if unknown:
        read.fail(min(unknown), "unknown key")
    parts = tuple(read.get(data, "parts", "parts", list))
    for part in parts:
        if part not in PART_NAMES:
            read.fail("parts", f"unknown part {part!r}; expected some of {', '.join(PART_NAMES)}")
    play_rules, training_rules = _rules_texts(read, data)
    instruction, examples = read.per_role(data, "instruction"), read.per_role(data, "examples")
    read.check_format(instruction[ATTACKER], "instruction.attacker", target_word="word")
    read.check_format(instruction[DEFENDER], "instruction.defender")  # the defender never sees the word
    turn, last_round = read.per_role(data, "turn"), read.per_role(data, "last_round")
    for role in ROLES:
        read.check_format(turn[role], f"turn.{role}", round=1, max_turns=5)
    history = read.get(data, "history", "history", dict)
    layouts, play_layout, training_layouts = _history_layouts(read, history)
    speakers = read.get(history, "speakers", "history.speakers", dict)
    return PromptTexts(
        source=source,
        separator=read.get(data, "separator", "separator"),
        parts=parts,
        play_rules=play_rules,
        training_rules=training_rules,
        instruction=instruction,
        examples=examples,
        history_empty=read.get(history, "empty", "history.empty"),
        history_header=read.get(history, "header", "history.header"),
        history_separator=read.get(history, "separator", "history.separator"),
        play_layout=play_layout,
        training_layouts=training_layouts,
        layouts=dict(layouts),
        speakers={k: read.get(speakers, k, f"history.speakers.{k}") for k in ("self", "other")},
        turn=turn,
        last_round=last_round,
    )


def _rules_texts(read: _TemplatesReader, data: dict) -> tuple[str, tuple[str, ...]]:
    """The rules of play and the paraphrases training draws from (``play`` there names the play text)."""
    rules = read.get(data, "rules", "rules", dict)
    play_rules = read.get(rules, "play", "rules.play")
    training_rules = []
    for i, text in enumerate(read.get(rules, "training", "rules.training", list)):
        if not isinstance(text, str):
            read.fail(f"rules.training[{i}]", "expected text")
        training_rules.append(play_rules if text == "play" else text)
    if not training_rules:
        read.fail("rules.training", "empty: give at least one rules text")
    for i, text in enumerate([play_rules, *training_rules]):
        read.check_format(text, "rules.play" if i == 0 else f"rules.training[{i - 1}]", max_turns=5)
    return play_rules, tuple(training_rules)


def _history_layouts(read: _TemplatesReader, history: dict) -> tuple[dict, str, tuple[str, ...]]:
    """The named history layouts, the one play uses and those training draws from."""
    layouts = read.get(history, "layouts", "history.layouts", dict)
    for name, line in layouts.items():
        if not isinstance(line, str):
            read.fail(f"history.layouts.{name}", "expected text")
        read.check_format(line, f"history.layouts.{name}", **_LAYOUT_FIELDS)
    play_layout = read.get(history, "play_layout", "history.play_layout")
    training_layouts = tuple(read.get(history, "training_layouts", "history.training_layouts", list))
    for name in (play_layout, *training_layouts):
        if name not in layouts:
            read.fail("history", f"layout {name!r} is not among history.layouts ({', '.join(layouts)})")
    if not training_layouts:
        read.fail("history.training_layouts", "empty: give at least one layout")
    return layouts, play_layout, training_layouts


@dataclass(frozen=True)
class Template:
    """One way of presenting the game: a rules text and a history layout, from a templates file."""

    rules: str
    layout: str = "lines"
    examples: bool = False
    texts: PromptTexts = field(default_factory=load_templates, repr=False, compare=False)


def play_template(templates: str | os.PathLike | None = None, examples: bool = False) -> Template:
    """The template of play (and evaluation) from a templates file (``None``: the shipped one)."""
    texts = load_templates(templates)
    return Template(rules=texts.play_rules, layout=texts.play_layout, examples=examples, texts=texts)


@lru_cache(maxsize=16)
def training_templates(templates: str | os.PathLike | None = None) -> tuple[Template, ...]:
    """Every rules text with every training layout, in file order (rules first)."""
    texts = load_templates(templates)
    return tuple(
        Template(rules=rules, layout=layout, texts=texts)
        for rules in texts.training_rules
        for layout in texts.training_layouts
    )


PLAY_TEMPLATE = play_template()
TRAINING_TEMPLATES = training_templates()


def _history_lines(
    texts: PromptTexts, layout: str, history: Sequence[Mapping[str, str]], role: str
) -> list[str]:
    line = texts.layouts[layout]
    return [
        line.format(
            role=u["role"],
            Role=u["role"].capitalize(),
            number=i + 1,
            content=u["content"],
            speaker=texts.speakers["self" if u["role"] == role else "other"],
        )
        for i, u in enumerate(history)
    ]


def build_prompt_with_bounds(
    role: str,
    target_word: str,
    history: Sequence[Mapping[str, str]],
    max_turns: int,
    template: Template = PLAY_TEMPLATE,
) -> tuple[str, list[int]]:
    """The prompt of :func:`build_prompt` and where its history lines lie in it.

    The bounds are character offsets: the start of each history line, oldest first, then the end of the
    last one (empty without history). ``text[:b[0]] + text[b[k]:]`` is the prompt without its ``k``
    oldest lines (:func:`spag.rewards.rows.drop_history_lines`): what a too-long training row gives up first, so the rules,
    the attacker's target word and the turn line are never cut.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    texts = template.texts
    game_round = len(history) // 2 + 1
    turn = texts.turn[role].format(round=game_round, max_turns=max_turns)
    if game_round >= max_turns:
        turn += texts.last_round[role]
    lines = _history_lines(texts, template.layout, history, role)
    parts = {
        "rules": template.rules.format(max_turns=max_turns),
        "instruction": (
            texts.instruction[role].format(target_word=target_word)
            if role == ATTACKER
            else texts.instruction[role].format()
        ),
        "examples": texts.examples[role] if template.examples else "",
        "history": texts.history_header + texts.history_separator.join(lines)
        if history
        else texts.history_empty,
        "turn": turn,
    }
    shown = [name for name in texts.parts if parts[name]]
    text = texts.separator.join(parts[name] for name in shown)
    bounds: list[int] = []
    if lines:
        offset = sum(len(parts[name]) + len(texts.separator) for name in shown[: shown.index("history")])
        offset += len(texts.history_header)
        for line in lines:
            bounds.append(offset)
            offset += len(line) + len(texts.history_separator)
        bounds.append(offset - len(texts.history_separator))
    return text, bounds


def build_prompt(
    role: str,
    target_word: str,
    history: Sequence[Mapping[str, str]],
    max_turns: int,
    template: Template = PLAY_TEMPLATE,
) -> str:
    """The text of the user message that asks ``role`` for its next utterance."""
    return build_prompt_with_bounds(role, target_word, history, max_turns, template)[0]


def training_prompt_with_bounds(
    role: str,
    target_word: str,
    history: Sequence[Mapping[str, str]],
    max_turns: int,
    rng: random.Random,
    templates: str | os.PathLike | None = None,
) -> tuple[str, list[int]]:
    """A prompt for a training row, with a template drawn by ``rng`` from :func:`training_templates`, and
    its history bounds (see :func:`build_prompt_with_bounds`)."""
    return build_prompt_with_bounds(
        role, target_word, history, max_turns, rng.choice(training_templates(templates))
    )


def training_prompt(*args, **kwargs) -> str:
    """The text of :func:`training_prompt_with_bounds` (same arguments)."""
    return training_prompt_with_bounds(*args, **kwargs)[0]


def next_role(history: Sequence[Mapping[str, str]]) -> str:
    """The attacker speaks first; roles alternate."""
    return ATTACKER if len(history) % 2 == 0 else DEFENDER
