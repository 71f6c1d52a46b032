"""``spag words``: the target word list and its training / held-out split."""

from __future__ import annotations

from pathlib import Path

import typer

from spag.commands.options import checked, claim_outputs, given, knobs, overwrite_option, with_knobs
from spag.config import Words
from spag.game.words import split_words, top_words, words_from_file, write_words
from spag.harness.claims import check_distinct_paths
from spag.runtime.console import error, summary
from spag.runtime.errors import DataError

_FLAGS = {
    "nouns_only": ("--nouns-only/--all-words",),
    "skip_stop_words": ("--skip-stop-words/--keep-stop-words",),
}


def register(app: typer.Typer) -> None:
    @app.command("words")
    @with_knobs(knobs(Words, flags=_FLAGS))
    def words_command(
        output: Path = typer.Option(..., "-o", "--output", help="Where to write the words, one per line."),
        train_out: Path | None = typer.Option(None, "--train-out", help="Also write the training split."),
        eval_out: Path | None = typer.Option(None, "--eval-out", help="Also write the held-out split."),
        overwrite: bool = overwrite_option(),
        **settings,
    ) -> None:
        """Write the most frequent English words (wordfreq) or a list file's, stop words removed."""
        w = checked(Words, **given(settings, Words))
        source = w.source
        outputs = {"-o": output, "--train-out": train_out, "--eval-out": eval_out}
        try:
            check_distinct_paths({"--source": source}, outputs)
            claim_outputs(outputs, overwrite=overwrite)
        except DataError as exc:
            error(str(exc))
            raise typer.Exit(2)
        if source is not None:
            try:
                words = words_from_file(
                    source, w.top, nouns_only=w.nouns_only, skip_stop_words=w.skip_stop_words
                )
            except DataError as exc:
                error(str(exc))
                raise typer.Exit(2)
        else:
            words = top_words(w.top, nouns_only=w.nouns_only, skip_stop_words=w.skip_stop_words)
        write_words(words, output)
        train, held = split_words(words, w.eval_fraction)
        if train_out:
            write_words(train, train_out)
        if eval_out:
            write_words(held, eval_out)
        summary("words", f"{len(words)} words -> {output} ({len(train)} training, {len(held)} held out)")
