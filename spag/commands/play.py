"""``spag play``: collect self-play episodes, one game per target."""

from __future__ import annotations

from pathlib import Path

import typer

from spag.commands.options import (
    checked,
    claim_outputs,
    game_from,
    game_knobs,
    given,
    hold_output,
    knobs,
    option,
    strategies_from,
    strategy_knobs,
    with_knobs,
)
from spag.config import Play, Sampling, Settings
from spag.game.episodes import export_json as write_json
from spag.game.words import read_words
from spag.harness.claims import check_distinct_paths
from spag.harness.plays import claim_episodes
from spag.models.devices import pin_rank_to_gpus
from spag.models.loading import check_model
from spag.pipeline.preflight import cuda_problem, refuse
from spag.play.engine import PlayConfig, PlayStats, rank_and_world, run_games
from spag.players import PlayerError
from spag.runtime.console import error, summary
from spag.runtime.errors import DataError
from spag.runtime.records import read_text

# Play's sampling and player knobs (the words, launcher and held-out switch are the pipeline's).
_SAMPLING = knobs(Play, only=Sampling.model_fields)


def check_targets(words: list[str], path: Path, game) -> None:
    """Refuse a line of the words file that is not a target of ``game`` (Kuhn poker's ``K-K``), naming the
    file and the line: found before any model loads, not by the first game played on it."""
    for word in words:
        try:
            game.check_target(word)
        except ValueError as exc:
            raise DataError(path, None, f"{_line_of(path, word)}{exc}") from None


def _line_of(path: Path, word: str) -> str:
    """``"line N: "`` of the first line of ``path`` that holds ``word`` (as the words reader strips it)."""
    lines = read_text(path).removeprefix("\ufeff").split("\n")
    found = next((n for n, line in enumerate(lines, start=1) if line.strip() == word), None)
    return f"line {found}: " if found else ""


def register(app: typer.Typer) -> None:
    @app.command("play")
    @with_knobs(_SAMPLING, game_knobs(), strategy_knobs())
    def play_command(
        attacker: str = typer.Option(
            ...,
            "--attacker",
            help="The opening role's model (Adversarial Taboo: the "
            "attacker): HF id, local checkpoint, or 'human'.",
        ),
        defender: str = typer.Option(
            ..., "--defender", help="The other role's model: HF id, local checkpoint, or 'human'."
        ),
        words_file: Path = typer.Option(
            ..., "--words", help="Targets, one per line (Adversarial Taboo: words)."
        ),
        output: Path = typer.Option(
            ..., "-o", "--output", help="Episodes: a directory of Parquet shards, or one .parquet file."
        ),
        limit: int | None = typer.Option(None, "--limit", min=1, help="Only the first N words."),
        seed: int = option(Settings, "seed"),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in OUTPUT."),
        overwrite: bool = typer.Option(
            False,
            "--overwrite",
            help="Replace a previous `spag play` output in OUTPUT, and an --export-json "
            "file spag wrote (nothing else).",
        ),
        guess_words: Path | None = typer.Option(
            None,
            "--guess-words",
            help="The vocabulary a strategy chooses from (Adversarial Taboo's "
            "--final-guess; default: --words).",
        ),
        export_json: Path | None = typer.Option(
            None, "--export-json", help="Also write the episodes in the original JSON list format."
        ),
        trust_remote_code: bool = typer.Option(
            False, "--trust-remote-code", help="Allow model code from the hub."
        ),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
        **settings,
    ) -> None:
        """Play a game (Adversarial Taboo by default) between two models and store the judged episodes."""
        if "human" in (attacker, defender):
            settings["batch_size"] = 1  # one game at a time when a person is typing
        sampling = checked(Play, **given(settings, Sampling))
        game = game_from(settings)  # a bad setting or templates file stops here, before any model is loaded
        strategies = strategies_from(settings, game)
        if guess_words is not None and not game.uses_vocabulary:
            error(f"--guess-words: the game {game.name} has no strategy that chooses among words")
            raise typer.Exit(2)
        if sampling.backend not in ("hf", "vllm", "openai"):
            error(f"--backend must be one of hf, vllm, openai (got {sampling.backend!r})")
            raise typer.Exit(2)
        if sampling.backend == "vllm":  # under torchrun, this rank's GPUs only: before anything looks at CUDA
            pin_rank_to_gpus(sampling.tensor_parallel_size)
        if sampling.backend != "openai":
            refuse([p for p in (cuda_problem(),) if p])
        templates = settings.get("templates")
        check_distinct_paths(
            {"--words": words_file, "--guess-words": guess_words, "--templates": templates},
            {"-o": output, "--export-json": export_json},
        )
        rank, world = rank_and_world()
        if export_json is not None and world > 1:  # each rank writes its own share
            export_json = export_json.with_name(f"{export_json.stem}.r{rank}{export_json.suffix}")
        claim_outputs({"--export-json": export_json}, overwrite=overwrite)  # written after the last game
        hold_output(output, f"r{rank}" if world > 1 else None)  # a second writer stops before loading a model
        claim_episodes(output, overwrite=overwrite and not resume, resume=resume, rank=rank, world=world)
        words = read_words(words_file, repeats=game.few_targets)  # a deal listed twice is dealt twice
        check_targets(words, words_file, game)  # before any model loads
        if limit is not None:
            words = words[:limit]
        for model, side in ((attacker, "--attacker"), (defender, "--defender")):
            if model != "human":
                check_model(model, side, trust_remote_code)
        chosen_guess_words = read_words(guess_words) if guess_words else words
        config = PlayConfig(game, sampling, seed, strategies)
        stats = PlayStats()
        try:
            episodes = run_games(
                attacker,
                defender,
                words,
                config,
                backend=sampling.backend,
                output=output,
                resume=resume,
                overwrite=overwrite,
                show_progress=progress,
                stats=stats,
                guess_words=chosen_guess_words,
                trust_remote_code=trust_remote_code,
                **sampling.player_options(),
            )
        except PlayerError as exc:
            error(str(exc))
            raise typer.Exit(1)
        except ValueError as exc:  # e.g. --final-guess with a backend that cannot score words
            error(str(exc))
            raise typer.Exit(2)
        if export_json is not None:
            write_json(episodes, export_json)
        where = f"rank {rank}/{world}: " if world > 1 else ""
        summary("play", f"{where}{stats.line()} -> {output}")
