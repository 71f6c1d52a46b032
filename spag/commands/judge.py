"""``spag judge``: decide finished episodes with the rules."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import typer

from spag.commands.options import claim_outputs, game_from, game_knobs, overwrite_option, with_knobs
from spag.game.episodes import judged, read_episodes
from spag.harness.claims import check_distinct_paths
from spag.runtime.atomic import write_jsonl_atomic
from spag.runtime.console import summary
from spag.runtime.errors import DataError


def check_same_game(episodes: list[dict], game, source: Path) -> None:
    """Refuse an episode that records another game than the one asked for (``--game``): a game's judge
    cannot decide another's episodes, and judging them by the game they record instead would answer a
    question the user did not ask."""
    for index, episode in enumerate(episodes):
        played = episode.get("game")
        if played and played != game.name:
            raise DataError(
                source, index, f"was played in {played}, not {game.name}: judge it with --game {played}"
            )


def register(app: typer.Typer) -> None:
    @app.command("judge")
    @with_knobs(game_knobs())
    def judge_command(
        episodes: Path = typer.Argument(..., help="Episodes: JSON list, JSONL, or Parquet (file or dir)."),
        output: Path | None = typer.Option(None, "-o", "--output", help="JSONL out (default stdout)."),
        overwrite: bool = overwrite_option(),
        **settings,
    ) -> None:
        """Add `outcome` and `turns` to every episode (the game's judge, with its settings over the game's
        defaults: Adversarial Taboo's --rules); all input fields are kept. An episode that records another
        game than --game is refused."""
        game = game_from(settings)
        check_distinct_paths({"EPISODES": episodes}, {"-o": output})
        claim_outputs({"-o": output}, overwrite=overwrite)
        episodes_read = read_episodes(episodes, game)
        if not episodes_read:
            raise DataError(episodes, None, "holds no episodes")
        check_same_game(episodes_read, game, episodes)
        results = judged(episodes_read, game)
        if output is None:
            for record in results:
                sys.stdout.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        else:
            write_jsonl_atomic(output, results)
        counts = Counter(r["outcome"] for r in results)
        summary(
            "judge", f"{len(results)} episodes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        )
