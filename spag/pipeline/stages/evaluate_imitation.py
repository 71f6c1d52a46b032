"""Stage ``evaluate_imitation``: the imitation model's benchmark scores and skill metrics (Kuhn poker: its
strategy).

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from spag.config import Settings
from spag.pipeline.benchmarking import benchmark_model, reasoning_line
from spag.pipeline.context import Layout
from spag.pipeline.evaluation import (
    evaluation_games,
    imitation_openings,
    load_scorer,
    measure_skill,
    measures_skill,
    skill_line,
    write_checkpoint_strategy,
)
from spag.play.engine import OpeningLines
from spag.players import close_player
from spag.runtime.atomic import write_json_atomic
from spag.runtime.console import summary


def evaluate_imitation(settings: Settings, layout: Layout) -> None:
    """The imitation model's benchmark scores and skill metrics: the baseline of every epoch's; in Kuhn poker
    its strategy and exploitability."""
    scores = benchmark_model(settings, layout, layout.model("imitation"), layout.metrics / "imitation")
    line = reasoning_line(scores)
    said = OpeningLines()  # its opening lines, which the games of later stages read
    if measures_skill(settings):
        words, config = evaluation_games(settings, layout)
        model = load_scorer(settings, layout.model("imitation"))
        judge_player = load_scorer(settings, layout.base_model)
        try:
            skill = measure_skill(settings, layout, model, judge_player, words, config, said=said)
        finally:
            close_player(model, judge_player)
        line += "; " + skill_line(skill)
    else:
        skill = {"skill": "off"}
    write_json_atomic(layout.metrics / "imitation" / "skill.json", skill)
    said.write(imitation_openings(layout))
    strategy = write_checkpoint_strategy(settings, layout.model("imitation"), layout.metrics / "imitation")
    if strategy:
        line += "; " + strategy
    summary("evaluate_imitation", line)
