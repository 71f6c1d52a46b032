"""Stage ``teacher_play``: the teacher plays itself (or its episodes are imported).

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

from collections import Counter

from spag.config import Settings
from spag.game.base import Game
from spag.game.episodes import import_episodes
from spag.game.words import read_words
from spag.harness.folders import PLAY_KIND
from spag.harness.partial import resumable_output
from spag.harness.plays import claimed_episodes
from spag.pipeline.context import Layout, setting_file
from spag.pipeline.games import sample_words, stage_game
from spag.play.engine import PlayConfig, PlayStats, run_games
from spag.rewards.ready_made import import_ready_made_rows
from spag.runtime.console import summary
from spag.runtime.errors import DataError


def teacher_play(settings: Settings, layout: Layout) -> None:
    """The teacher plays itself; its winning moves become the imitation data.

    Or ``teacher.episodes`` imports existing episodes (the original's GPT-4 games, judged by ``game.rules``,
    held-out words left out), or ``teacher.rows`` a ready-made imitation file (used as it is). DVC tracks
    the file's path, not its content: after changing the file in place, run ``dvc repro -f teacher_play``.
    """
    t, game = settings.teacher, stage_game(settings)
    out = layout.data / "teacher" / "episodes"
    if t.rows:
        try:
            n = import_ready_made_rows(setting_file(settings, "teacher.rows"), out, game)
        except DataError as exc:
            raise DataError("teacher.rows", None, str(exc)) from None
        summary("teacher_play", f"{n} ready-made imitation rows imported from {t.rows} (no games played)")
        return
    if t.episodes:
        try:
            held = [] if game.few_targets else read_words(layout.words / "eval.txt")
            episodes, held_out = import_episodes(
                setting_file(settings, "teacher.episodes"), out, game, exclude_words=held
            )
        except DataError as exc:
            raise DataError("teacher.episodes", None, str(exc)) from None
        summary(
            "teacher_play",
            f"{len(episodes)} episodes imported from {t.episodes} ({held_out} on held-out "
            f"targets left out), judged by {game.name}'s judge; {_wins(game, episodes)}",
        )
        return

    seed = settings.seed
    chosen = sample_words(layout.words / "train.txt", t.words, f"{seed}-teacher", game)
    model = str(layout.base_model) if t.model == "base" else t.model
    config = PlayConfig(game, t, seed, settings.strategies())
    stats = PlayStats()
    # Resumable under `dvc repro`: the shards live beside the declared output until the stage finishes.
    with resumable_output(out, PLAY_KIND) as work, claimed_episodes(work, overwrite=False, resume=True):
        episodes = run_games(
            model,
            model,
            chosen,
            config,
            backend=t.backend,
            output=work,
            resume=True,
            stale="restart",
            guess_words=read_words(layout.words / "all.txt"),
            stats=stats,
            **t.player_options(),
        )
    summary("teacher_play", f"{stats.line()}; {_wins(game, episodes)}")


def _wins(game: Game, episodes) -> str:
    """How many games each role won: the imitation set is made of these."""
    wins = Counter(game.sides(e["outcome"])[0] for e in episodes)
    return "wins for imitation: " + ", ".join(f"{role} {wins[role]}" for role in game.roles)
