"""``spag words``: the target word list and its training / held-out split."""

from __future__ import annotations

from pathlib import Path
import typer


def register(app: typer.Typer) -> None:
    @app.command("words")
    def words_command(
        output: Path = typer.Option(..., "-o", "--output", help="Where to write the words, one per line."),
        top: int = typer.Option(50_000, "--top", min=1, help="How many of the most frequent words."),
        train_out: Path | None = typer.Option(None, "--train-out", help="Also write the training split."),
        eval_out: Path | None = typer.Option(None, "--eval-out", help="Also write the held-out split."),
        eval_fraction: float = typer.Option(0.1, "--eval-fraction", min=0.0, max=1.0, help="Share of words held out."),
        nouns_only: bool = typer.Option(False, "--nouns-only", help="Only words that are always nouns."),
    ) -> None:
        """Write the most frequent English words (wordfreq), stop words removed."""
        from spag.console import summary
        from spag.words import split_words, top_words, write_words

        words = top_words(top, nouns_only=nouns_only)
        write_words(words, output)
        train, held = split_words(words, eval_fraction)
        if train_out:
            write_words(train, train_out)
        if eval_out:
            write_words(held, eval_out)
        summary("words", f"{len(words)} words -> {output} ({len(train)} training, {len(held)} held out)")
