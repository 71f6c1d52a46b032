"""Stage ``skill_clues``: the fixed inputs of the game's skill metrics (Adversarial Taboo: the base model's
clue lines for the guess rank).

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

import json

from spag.config import Settings
from spag.pipeline.context import Layout
from spag.pipeline.evaluation import base_openings, evaluation_games, load_scorer, measures_skill
from spag.play.engine import OpeningLines
from spag.players import close_player
from spag.runtime.atomic import write_text_atomic
from spag.runtime.console import summary


def skill_clues(settings: Settings, layout: Layout) -> None:
    """The fixed inputs of the game's skill metrics (Adversarial Taboo: the clue lines of the guess rank, the
    base model's plain descriptions of each evaluation word, the word blanked out), kept as opening lines too
    (:func:`spag.pipeline.evaluation.base_openings`); none when the evaluation measures no skill."""
    material: list[dict] = []
    said = OpeningLines()
    words, config = evaluation_games(settings, layout)
    e = settings.evaluate
    if measures_skill(settings):
        base = load_scorer(settings, layout.base_model)
        try:
            material = config.game.skill.material(config.game, base, words, config, e.clue_lines, said=said)
        finally:
            close_player(base)
    write_text_atomic(layout.data / "skill" / "clues.jsonl", "".join(json.dumps(c) + "\n" for c in material))
    said.write(base_openings(layout))
    summary(
        "skill_clues",
        f"{len(material)} fixed inputs of the skill metrics on {len(words)} targets "
        f"({e.word_set} set) by the base model",
    )
