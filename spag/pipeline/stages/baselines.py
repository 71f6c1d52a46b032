"""Stage ``baselines``: the no-training baselines against the imitation model, with their skill metrics.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

import json

from spag.config import Settings
from spag.evaluate.games import evaluate_models, strongest
from spag.harness.folders import mark_output_dir
from spag.harness.partial import resumable_output
from spag.pipeline.context import Layout
from spag.pipeline.evaluation import (
    base_openings,
    baseline_names,
    evaluation_games,
    guess_vocabulary,
    imitation_openings,
    load_scorer,
    measure_skill,
    measures_skill,
)
from spag.play.engine import OpeningLines
from spag.players import close_player
from spag.runtime.atomic import write_json_atomic
from spag.runtime.console import summary


def baselines(settings: Settings, layout: Layout) -> None:
    """Each of the game's no-training baselines (:class:`spag.game.base.SkillMetrics`) against the imitation
    model on the evaluation words and seeds, with its skill metrics: ``metrics/baselines/NAME.json``."""
    e = settings.evaluate
    words, config = evaluation_games(settings, layout)
    names, skill_on = baseline_names(settings), measures_skill(settings)
    results = {}
    (layout.metrics / "baselines").mkdir(parents=True, exist_ok=True)
    if names:
        imitation_skill = (
            json.loads((layout.metrics / "imitation" / "skill.json").read_text()) if skill_on else None
        )
        players = {
            "imitation": load_scorer(settings, layout.model("imitation")),
            "base": load_scorer(settings, layout.base_model),
        }
        try:
            # The imitation model's opening lines, the same against every baseline, said in evaluate_imitation;
            # the base model's coached ones (base-teacher's), said in skill_clues.
            openings = OpeningLines.read(imitation_openings(layout), base_openings(layout))
            with resumable_output(layout.data / "baselines" / "episodes", "evaluate") as work:
                work.mkdir(parents=True, exist_ok=True)
                for name in names:
                    player = config.game.skill.baseline(name, players)
                    games = evaluate_models(
                        player,
                        players["imitation"],
                        words,
                        config,
                        episodes_out=work / name,
                        resume=True,
                        stale="restart",
                        seeds=e.seeds,
                        guess_words=guess_vocabulary(layout, words),
                        openings=openings,
                    )
                    entry = {"games": games}
                    if skill_on:
                        # A baseline that plays with the imitation model has its guess rank (metrics/imitation).
                        same = (
                            imitation_skill if config.game.skill.baseline_model(name) == "imitation" else None
                        )
                        entry["skill"] = measure_skill(
                            settings,
                            layout,
                            player,
                            players["base"],
                            words,
                            config,
                            played=work / name,
                            model_skill=same,
                        )
                    results[name] = entry
                    write_json_atomic(layout.metrics / "baselines" / f"{name}.json", entry)
        finally:
            close_player(*players.values())
    else:
        mark_output_dir(layout.data / "baselines" / "episodes", "evaluate")  # the declared output, empty
    best = strongest({name: r["games"] for name, r in results.items()})
    scores = ", ".join(
        f"{name} {r['games']['bootstrap']['score']['value']:.3f}" for name, r in results.items()
    )
    summary(
        "baselines",
        f"score vs imitation: {scores}; strongest: {best}"
        if results
        else f"no baselines ({config.game.name} has none, or evaluate.baselines is empty)",
    )
