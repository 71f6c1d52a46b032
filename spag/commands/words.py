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
        source: Path | None = typer.Option(
            None, "--source", help="Take the words from this list file (one per line, order kept) instead of "
                                   "wordfreq, e.g. the original project's all_target_words.txt."),
        keep_stop_words: bool = typer.Option(False, "--keep-stop-words",
                                             help="Keep function words (the original's list plays them)."),
    ) -> None:
        """Write the most frequent English words (wordfreq) or a list file's, stop words removed."""
        from spag.console import error, summary
        from spag.io import DataError
        from spag.words import split_words, top_words, words_from_file, write_words

        if source is not None:
            try:
                words = words_from_file(source, top, nouns_only=nouns_only, skip_stop_words=not keep_stop_words)
            except DataError as exc:
                error(str(exc))
                raise typer.Exit(2)
        else:
            words = top_words(top, nouns_only=nouns_only, skip_stop_words=not keep_stop_words)
        write_words(words, output)
        train, held = split_words(words, eval_fraction)
        if train_out:
            write_words(train, train_out)
        if eval_out:
            write_words(held, eval_out)
        summary("words", f"{len(words)} words -> {output} ({len(train)} training, {len(held)} held out)")
