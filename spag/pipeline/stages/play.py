"""Stage ``play@N``: the previous checkpoint plays itself on this epoch's words.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from pathlib import Path

from spag.analyze import run_query
from spag.config import Settings
from spag.game.base import Game
from spag.game.episodes import read_episodes
from spag.harness.folders import PLAY_KIND
from spag.harness.partial import resumable_output
from spag.harness.play_job import play_under_launcher
from spag.harness.plays import claim_episodes, claimed_episodes
from spag.pipeline.context import Layout, previous_model
from spag.pipeline.games import sample_words, stage_game
from spag.play.engine import PlayConfig, PlayStats, run_games
from spag.runtime.atomic import write_json_atomic
from spag.runtime.console import summary


def play(settings: Settings, layout: Layout, epoch: str) -> None:
    """The previous checkpoint plays itself on this epoch's training words."""
    p, seed = settings.play, settings.seed
    # Each epoch plays a fresh seeded sample of the training words (the paper plays all of them, and the
    # original's list had no held-out part: include_held_out).
    source = layout.words / ("all.txt" if p.include_held_out else "train.txt")
    chosen = sample_words(source, p.words, f"{seed}-{epoch}", stage_game(settings))
    model = str(previous_model(settings, layout, epoch))
    stats = PlayStats()
    episodes = layout.epoch(epoch) / "episodes"
    # Shards go to a work folder beside the declared output, which DVC does not delete: a killed stage
    # continues from its finished games on the next `dvc repro` (see spag.harness.folders).
    config = PlayConfig(stage_game(settings), p, seed + int(epoch))
    with resumable_output(episodes, PLAY_KIND) as work:
        if p.launcher:  # one rank per GPU (or per tensor-parallel group), the words shared by rank
            claim_episodes(work, overwrite=False, resume=True)  # each rank locks its own shards
            stats = play_under_launcher(
                p.launcher, model, chosen, config, p.backend, p.player_options(), work
            )
        else:
            with claimed_episodes(work, overwrite=False, resume=True):
                run_games(
                    model,
                    model,
                    chosen,
                    config,
                    backend=p.backend,
                    output=work,
                    resume=True,
                    stale="restart",
                    stats=stats,
                    **p.player_options(),
                )
    selfplay = selfplay_figures(stage_game(settings), episodes)
    write_json_atomic(
        layout.metrics / "epochs" / epoch / "selfplay.json",
        {**selfplay, "provenance": stats.provenance},
    )
    summary(
        f"play@{epoch}",
        f"{stats.line()}; decisive {selfplay['decisive_rate']:.2f}, foul {selfplay['foul_rate']:.2f}",
    )


def selfplay_figures(game: Game, episodes: Path) -> dict:
    """The learning-curve numbers of a folder of self-play episodes: decisive, foul and win rates and
    lengths (DuckDB), and under ``collapse`` the game's figures of how varied the play was."""
    (selfplay,) = run_query("selfplay", str(episodes / "*.parquet"))
    for line in run_query("win_rate", str(episodes / "*.parquet")):
        selfplay.update(
            {
                f"{line['role']}_win_rate": line["win_rate"],
                f"{line['role']}_win_rate_low": line["ci_low"],
                f"{line['role']}_win_rate_high": line["ci_high"],
            }
        )
    collapse = game.collapse_metrics(read_episodes(episodes, game))
    return {**selfplay, **({"collapse": collapse} if collapse else {})}
