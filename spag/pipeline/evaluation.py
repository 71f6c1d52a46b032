"""What every evaluation stage shares: the evaluation words and games, the baselines it plays, the skill
metrics and their fixed inputs, and (Kuhn poker) the checkpoint's strategy and its exploitability."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from spag.config import Evaluate, Generation
from spag.evaluate.games import check_held_out, opening_lines_played
from spag.evaluate.strategy import exploitability_report, strategy_line, strategy_of, write_strategy
from spag.game.kuhn import KuhnPoker
from spag.game.words import read_words, sample_targets
from spag.pipeline.context import Declared, Layout
from spag.pipeline.games import sample_words, stage_game
from spag.play.engine import OpeningLines, PlayConfig
from spag.players import close_player, load_player
from spag.runtime.errors import ParamsError

# The one game whose strategy the evaluation reads (spag.evaluate.strategy).
STRATEGY_GAME = KuhnPoker.name
# The backends whose players give log-probabilities (next_token_logprobs, continuation_logprobs).
SCORING_BACKENDS = ("hf", "vllm")


def scoring_backend(settings: Declared) -> str:
    """The backend the skill metrics, the baselines (the dictionary guess reads log-probabilities) and the
    opening lines they share run on: ``evaluate.backend`` where it scores, else hf. One backend for all of
    them keeps every epoch's skill comparable with the imitation model's and the baselines'."""
    backend = settings.evaluate.backend
    return backend if backend in SCORING_BACKENDS else "hf"


def load_scorer(settings: Declared, model: str | Path):
    """``model`` on :func:`scoring_backend`, with ``evaluate``'s options for that backend."""
    backend = scoring_backend(settings)
    return load_player(str(model), backend, **settings.evaluate.player_options(backend))


def evaluation_games(settings: Declared, layout: Layout):
    """(evaluation targets, PlayConfig) of every evaluation game: from ``evaluate.seed`` alone, the same for
    every epoch, training seed, baseline and experiment, so all comparisons are paired."""
    e, game = settings.evaluate, stage_game(settings)
    if e.word_set == "fresh":
        try:
            chosen = sample_targets(
                game.fresh_targets(), e.words, seed=f"evaluate-{e.seed}", repeat=game.few_targets
            )
        except ValueError as exc:
            raise ParamsError("params.yaml", "evaluate.word_set", str(exc)) from None
        check_held_out(
            game,
            chosen,
            read_words(layout.words / "all.txt"),
            f"{game.name}'s fresh set",
            "data/words/all.txt",
        )
    else:
        chosen = sample_words(layout.words / "eval.txt", e.words, f"evaluate-{e.seed}", game)
    return chosen, evaluation_config(settings)


def evaluation_config(settings: Declared) -> PlayConfig:
    """The PlayConfig of every evaluation game (the game, ``evaluate``'s sampling, ``evaluate.seed``; a null
    ``evaluate.temperature`` is ``play.temperature``): what ``spag strategy --params`` builds too."""
    e = settings.evaluate
    sampling = Evaluate.model_validate({name: getattr(e, name) for name in Generation.model_fields})
    if sampling.temperature is None:
        sampling.temperature = settings.play.temperature
    return PlayConfig(stage_game(settings), sampling, e.seed)


def guess_vocabulary(layout: Layout, words: list[str]) -> list[str]:
    """The public vocabulary a dictionary-guessing baseline guesses from: the game's words and these."""
    return list(dict.fromkeys([*read_words(layout.words / "all.txt"), *words]))


def measures_skill(settings: Declared) -> bool:
    """Whether the evaluation measures skill: ``evaluate.skill``, or by default whenever the game has skill
    metrics."""
    e = settings.evaluate
    return bool(e.skill) if e.skill is not None else stage_game(settings).skill is not None


def baseline_names(settings: Declared) -> list[str]:
    """The no-training baselines the evaluation plays: ``evaluate.baselines``, or all of the game's."""
    e, game = settings.evaluate, stage_game(settings)
    if e.baselines is not None:
        return list(e.baselines)
    return list(game.skill.baselines) if game.skill is not None else []


def skill_material(layout: Layout) -> list[dict]:
    path = layout.data / "skill" / "clues.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def base_openings(layout: Layout) -> Path:
    """The base model's coached opening lines on the evaluation words (:class:`OpeningLines`), written with
    the skill metrics' clue lines by ``skill_clues`` and read by ``baselines`` (the base-teacher's openings)."""
    return layout.data / "skill" / "opening_lines.json"


def imitation_openings(layout: Layout) -> Path:
    """The imitation model's opening lines on the evaluation words (:class:`OpeningLines`), written by
    ``evaluate_imitation`` and read by every later stage that plays that model there."""
    return layout.data / "imitation" / "opening_lines.json"


def measure_skill(
    settings: Declared,
    layout: Layout,
    player,
    judge_player,
    words: list[str],
    config,
    played: Path | None = None,
    model_skill: dict | None = None,
    said: OpeningLines | None = None,
) -> dict:
    """The skill metrics of ``player``; ``played``: the folder of its evaluation games on ``words`` (on the hf
    backend, as the metrics are), whose opening lines the metrics then read instead of generating them;
    ``model_skill``: the metrics of the model ``player`` speaks with (see ``SkillMetrics.measure``);
    ``said``: where the opening lines generated here are kept, seed by seed, for later stages' games."""
    e = settings.evaluate
    openings = None
    if played is not None:
        openings = opening_lines_played(played, config.game, words, e.seeds)
    elif said is not None:
        openings = [
            line
            for s in range(e.seeds)
            for line in replace(config, seed=config.seed + s).opening_lines(player, words, said=said)
        ]
    return config.game.skill.measure(
        config.game,
        player,
        judge_player,
        words,
        config,
        skill_material(layout),
        per_target=e.seeds,
        seed=e.seed,
        openings=openings,
        model_skill=model_skill,
    )


def skill_line(skill: dict) -> str:
    shown = [
        f"{metric.replace('_', ' ')} {entry['value']:.2f}"
        for metric, entry in skill.items()
        if isinstance(entry, dict) and "value" in entry
    ]
    chance = next(
        (entry["chance"] for entry in skill.values() if isinstance(entry, dict) and "chance" in entry), None
    )
    return ", ".join(shown) + (f" (chance rank {chance:.1f})" if chance is not None else "")


def write_checkpoint_strategy(settings: Declared, model: Path, folder: Path) -> str | None:
    """Kuhn poker: ``model``'s strategy and its exploitability (:func:`spag.evaluate.strategy.strategy_of`,
    ``evaluate.strategy_samples`` replies per information set for the played way) as ``folder/strategy.jsonl``
    and ``folder/exploitability.json``, the files ``spag strategy`` writes; returns their summary line.
    ``model`` is loaded on the hf backend (the exact way scores continuations) with ``evaluate``'s options.

    Another game has no strategy here: an empty ``strategy.jsonl`` and ``{"strategy": "off", "game": NAME}``
    (the stage's declared outputs exist either way); returns None."""
    game = settings.game.name
    if game != STRATEGY_GAME:
        write_strategy(folder, [], {"strategy": "off", "game": game})
        return None
    player = load_player(str(model), "hf", **settings.evaluate.player_options("hf"))
    try:
        rows, figures = strategy_of(player, evaluation_config(settings), settings.evaluate.strategy_samples)
    finally:
        close_player(player)
    report = exploitability_report(rows, figures)
    write_strategy(folder, rows, report)
    return "strategy: " + strategy_line(report)
