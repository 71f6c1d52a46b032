"""``spag judge``: decide finished episodes with the rules."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import typer

from spag.commands.options import claim_outputs, option, overwrite_option
from spag.config import Game


def register(app: typer.Typer) -> None:
    @app.command("judge")
    def judge_command(
        episodes: Path = typer.Argument(..., help="Episodes: JSON list, JSONL, or Parquet (file or dir)."),
        output: Path | None = typer.Option(None, "-o", "--output", help="JSONL out (default stdout)."),
        rules: str = option(Game, "rules"),
        overwrite: bool = overwrite_option(),
    ) -> None:
        """Add `outcome` and `turns` to every episode; all input fields are kept."""
        import json

        from spag.console import summary
        from spag.game.episodes import judged, read_episodes
        from spag.game.rules import RULE_SETS
        from spag.io import write_jsonl_atomic

        if rules not in RULE_SETS:
            raise typer.BadParameter(f"expected one of {', '.join(RULE_SETS)}, got {rules!r}", param_hint="--rules")
        from spag.io import DataError, check_distinct_paths, replace_mode

        check_distinct_paths({"EPISODES": episodes}, {"-o": output})
        claim_outputs({"-o": output}, overwrite=overwrite)
        episodes_read = read_episodes(episodes)
        if not episodes_read:
            raise DataError(episodes, None, "holds no episodes")
        results = judged(episodes_read, rules)
        if output is None:
            for record in results:
                sys.stdout.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        else:
            write_jsonl_atomic(output, results, replace=replace_mode(overwrite))
        counts = Counter(r["outcome"] for r in results)
        summary("judge", f"{len(results)} episodes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
