"""Stage ``evaluate@N``: games against the imitation model (and the strongest baseline) on held-out words,
both roles; skill metrics; benchmark; Kuhn poker: the epoch's strategy.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from spag.config import Settings
from spag.evaluate.games import evaluate_models, strongest
from spag.harness.partial import resumable_output
from spag.pipeline.benchmarking import benchmark_model, benchmark_passed_over, reasoning_line
from spag.pipeline.context import Declared, Layout, previous_model
from spag.pipeline.evaluation import (
    baseline_names,
    evaluation_games,
    guess_vocabulary,
    imitation_openings,
    load_scorer,
    measure_skill,
    measures_skill,
    scoring_backend,
    skill_line,
    write_checkpoint_strategy,
)
from spag.play.engine import OpeningLines
from spag.players import close_player, load_player
from spag.runtime.atomic import write_json_atomic
from spag.runtime.console import summary


def evaluate(settings: Settings, layout: Layout, epoch: str) -> None:
    """Epoch N against the imitation model (with ``vs_previous`` also against epoch N-1, with
    ``vs_baseline`` against the strongest no-training baseline) on the evaluation words, both roles,
    ``evaluate.seeds`` games per word and role; its skill metrics (the epochs ``evaluate.skill_every``
    names); then its benchmark scores (those ``evaluate.benchmark.every`` names); in Kuhn poker its strategy
    and exploitability."""
    chosen, config = evaluation_games(settings, layout)
    model, folder = layout.model(f"epoch_{epoch}"), layout.metrics / "epochs" / epoch
    skill_on = _skill_due(settings, epoch)
    with ExitStack() as players:  # each player loaded once for every match, all closed at the end
        player, base = _epoch_players(settings, layout, model, skill_on, players)
        games = _games_against_opponents(settings, layout, epoch, player, base, chosen, config, players)
        skill = (
            _skill_of_epoch(settings, layout, epoch, model, player, base, chosen, config)
            if skill_on
            else None
        )
    write_json_atomic(folder / "games.json", games)
    _write_skill(settings, layout, folder, skill, config.game)
    strategy = write_checkpoint_strategy(settings, model, folder)
    scores = _benchmark_epoch(settings, layout, model, epoch)
    summary(f"evaluate@{epoch}", _summary_text(settings, games, skill, strategy, scores))


def _skill_due(settings: Declared, epoch: str) -> bool:
    return measures_skill(settings) and int(epoch) % settings.evaluate.skill_every == 0


def _epoch_players(settings: Declared, layout: Layout, model: Path, skill_on: bool, players: ExitStack):
    """(the epoch's model, the base model where a baseline or the skill metrics need it, else None), each
    closed when ``players`` closes."""
    e = settings.evaluate
    player = load_player(str(model), e.backend, **e.player_options())
    players.callback(close_player, player)
    base = None
    if e.vs_baseline or skill_on:
        base = load_scorer(settings, layout.base_model)
        players.callback(close_player, base)
    return player, base


def _games_against_opponents(
    settings: Declared, layout: Layout, epoch: str, player, base, chosen, config, players: ExitStack
) -> dict:
    """The epoch's games against each opponent (the imitation model; the previous epoch; the strongest
    baseline), each with its bootstrap intervals. Episodes go to a work folder beside the declared output,
    which DVC does not delete: a killed stage continues from its finished games on the next `dvc repro` (see
    spag.harness.folders). Each opponent is loaded for its match and closed after it (evaluate_models closes
    what it loads)."""
    e, game = settings.evaluate, config.game
    opponents: dict[str, Any] = {"vs_imitation": layout.model("imitation")}
    previous = previous_model(settings, layout, epoch)
    if e.vs_previous and previous != layout.model("imitation"):
        opponents["vs_previous"] = previous
    if e.vs_baseline:
        name = _strongest_baseline(layout, baseline_names(settings))
        imitation = load_scorer(settings, layout.model("imitation"))
        players.callback(close_player, imitation)
        opponents["vs_baseline"] = game.skill.baseline(name, {"imitation": imitation, "base": base})
        if e.backend == "vllm":
            # each engine takes its share of the GPU: one imitation engine for both matches
            opponents["vs_imitation"] = imitation
    # The model's opening lines, the same in every match, are generated once; the imitation model's were said
    # in evaluate_imitation.
    openings = OpeningLines.read(imitation_openings(layout))
    options = e.player_options()
    with resumable_output(layout.epoch(epoch) / "eval_episodes", "evaluate") as work:
        return {
            name: evaluate_models(
                player,
                opponent,
                chosen,
                config,
                episodes_out=work / name,
                resume=True,
                stale="restart",
                seeds=e.seeds,
                backend=e.backend,
                guess_words=guess_vocabulary(layout, chosen),
                openings=openings,
                **options,
            )
            for name, opponent in opponents.items()
        }


def _skill_of_epoch(
    settings: Declared, layout: Layout, epoch: str, model: Path, player, base, chosen, config
) -> dict:
    """The epoch's skill metrics, on the scoring backend (log-probabilities: hf or vllm), from the opening
    lines of its games against the imitation model where those were played on it."""
    e = settings.evaluate
    scorer = player if e.backend == scoring_backend(settings) else load_scorer(settings, model)
    try:
        played = layout.epoch(epoch) / "eval_episodes" / "vs_imitation" if scorer is player else None
        return measure_skill(settings, layout, scorer, base, chosen, config, played=played)
    finally:
        if scorer is not player:
            close_player(scorer)


def _write_skill(settings: Declared, layout: Layout, folder: Path, skill: dict | None, game) -> None:
    """skill.json: the epoch's skill metrics beside the imitation model's, or why there are none."""
    e = settings.evaluate
    if skill is not None:
        imitation_skill = json.loads((layout.metrics / "imitation" / "skill.json").read_text())
        skill["vs_imitation"] = game.skill.compare(skill, imitation_skill, seed=e.seed)
    skipped = {"skill": "off", **({"every": e.skill_every} if measures_skill(settings) else {})}
    write_json_atomic(folder / "skill.json", skill or skipped)


def _summary_text(
    settings: Declared, games: dict, skill: dict | None, strategy: str | None, scores: dict
) -> str:
    rates = "; ".join(
        f"{name}: score {_interval_text(g['bootstrap']['score'])} over {g['games']} games, "
        + ", ".join(
            f"{key.replace('_', ' ')} {value['value']:.2f}"
            for key, value in g["bootstrap"].items()
            if key.endswith("_foul_rate")
        )
        for name, g in games.items()
    )
    if skill is not None:
        rates += "; " + skill_line(skill)
    elif measures_skill(settings):
        rates += f"; skill not measured on this epoch (evaluate.skill_every: {settings.evaluate.skill_every})"
    if strategy:
        rates += "; " + strategy
    return f"{rates}; {reasoning_line(scores)}"


def _strongest_baseline(layout: Layout, names) -> str | None:
    results = {
        name: json.loads((layout.metrics / "baselines" / f"{name}.json").read_text())["games"]
        for name in names
    }
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
