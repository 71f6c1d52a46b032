"""Stage ``evaluate@N``: games against the imitation model (and the strongest baseline) on held-out words,
both roles; skill metrics; benchmark; Kuhn poker: the epoch's strategy.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spag.config import Settings
from spag.evaluate.games import evaluate_models, strongest
from spag.pipeline.benchmarking import benchmark_model, benchmark_passed_over, reasoning_line
from spag.pipeline.context import OWN, Declared, Layout, previous_model
from spag.pipeline.evaluation import (
    baseline_names,
    evaluation_games,
    guess_vocabulary,
    imitation_openings,
    measure_skill,
    measures_skill,
    skill_line,
    write_checkpoint_strategy,
)
from spag.play.engine import OpeningLines
from spag.players import close_player, load_player
from spag.runtime.console import summary
from spag.runtime.outputs import resumable_output, write_json_atomic


def evaluate(settings: Settings, layout: Layout, epoch: str) -> None:
    """Epoch N against the imitation model (with ``vs_previous`` also against epoch N-1, with
    ``vs_baseline`` against the strongest no-training baseline) on the evaluation words, both roles,
    ``evaluate.seeds`` games per word and role; its skill metrics (the epochs ``evaluate.skill_every``
    names); then its benchmark scores (those ``evaluate.benchmark.every`` names); in Kuhn poker its strategy
    and exploitability."""
    e = settings.evaluate
    chosen, config = evaluation_games(settings, layout)
    game, skill_wanted = config.game, measures_skill(settings)
    skill_on = skill_wanted and int(epoch) % e.skill_every == 0  # this epoch's skill metrics
    model = layout.model(f"epoch_{epoch}")
    options, hf = e.player_options(), e.player_options("hf")
    opponents: dict[str, Any] = {"vs_imitation": layout.model("imitation")}
    previous = previous_model(settings, layout, epoch)
    if e.vs_previous and previous != layout.model("imitation"):
        opponents["vs_previous"] = previous
    player = load_player(str(model), e.backend, **options)  # loaded once for every match
    base = None
    if e.vs_baseline or skill_on:
        base = load_player(str(layout.base_model), "hf", **hf)
    # Episodes go to a work folder beside the declared output, which DVC does not delete: a killed stage
    # continues from its finished games on the next `dvc repro` (see spag.runtime.outputs). Each opponent is
    # loaded for its match and closed after it (evaluate_models closes what it loads).
    try:
        if e.vs_baseline:
            name = _strongest_baseline(layout, baseline_names(settings))
            imitation = load_player(str(layout.model("imitation")), "hf", **hf)
            opponents["vs_baseline"] = game.skill.baseline(name, {"imitation": imitation, "base": base})
        # The model's opening lines, the same in every match, are generated once; the imitation model's were
        # said in evaluate_imitation.
        openings = OpeningLines.read(imitation_openings(layout))
        with resumable_output(layout.epoch(epoch) / "eval_episodes", "evaluate") as work:
            games = {name: evaluate_models(player, opponent, chosen, config, episodes_out=work / name,
                                           resume=True, stale="restart", seeds=e.seeds, backend=e.backend,
                                           guess_words=guess_vocabulary(layout, chosen), openings=openings,
                                           **options)
                     for name, opponent in opponents.items()}
        skill = None
        if skill_on:  # log-probabilities need the hf backend
            scorer = player if e.backend == "hf" else load_player(str(model), "hf", **hf)
            try:
                # The opening lines of its games against the imitation model, when they were played on hf.
                played = layout.epoch(epoch) / "eval_episodes" / "vs_imitation" if scorer is player else None
                skill = measure_skill(settings, layout, scorer, base, chosen, config, played=played)
            finally:
                if scorer is not player:
                    close_player(scorer)
    finally:
        close_player(*(p for p in (player, base, getattr(opponents.get("vs_baseline"), "player", None)) if p))
    write_json_atomic(layout.metrics / "epochs" / epoch / "games.json", games, replace=OWN)
    if skill is not None:
        imitation_skill = json.loads((layout.metrics / "imitation" / "skill.json").read_text())
        skill["vs_imitation"] = game.skill.compare(skill, imitation_skill, seed=e.seed)
    skipped = {"skill": "off", **({"every": e.skill_every} if skill_wanted else {})}
    write_json_atomic(layout.metrics / "epochs" / epoch / "skill.json", skill or skipped, replace=OWN)
    strategy = write_checkpoint_strategy(settings, model, layout.metrics / "epochs" / epoch)
    scores = _benchmark_epoch(settings, layout, model, epoch)
    rates = "; ".join(f"{name}: score {_interval_text(g['bootstrap']['score'])} over {g['games']} games, "
                      + ", ".join(f"{key.replace('_', ' ')} {value['value']:.2f}"
                                  for key, value in g["bootstrap"].items() if key.endswith("_foul_rate"))
                      for name, g in games.items())
    if skill is not None:
        rates += "; " + skill_line(skill)
    elif skill_wanted:
        rates += f"; skill not measured on this epoch (evaluate.skill_every: {e.skill_every})"
    if strategy:
        rates += "; " + strategy
    summary(f"evaluate@{epoch}", f"{rates}; {reasoning_line(scores)}")


def _strongest_baseline(layout: Layout, names) -> str | None:
    results = {name: json.loads((layout.metrics / "baselines" / f"{name}.json").read_text())["games"]
               for name in names}
    return strongest(results)


def _benchmark_epoch(settings: Declared, layout: Layout, model: Path, epoch: str) -> dict:
    """An epoch's benchmark scores, or, when ``evaluate.benchmark.every`` passes it over, a note saying so
    (the stage's outputs are there either way)."""
    every = settings.evaluate.benchmark.every
    folder = layout.metrics / "epochs" / epoch
    if int(epoch) % every == 0:
        return benchmark_model(settings, layout, model, folder)
    return benchmark_passed_over(folder, every=every)


def _interval_text(point: dict) -> str:
    return f"{point['value']:.3f} [{point['low']:.3f}, {point['high']:.3f}]"
