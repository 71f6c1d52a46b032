"""``spag play``: collect self-play episodes, one game per target word."""

from __future__ import annotations

from pathlib import Path

import typer

from spag.commands.options import checked, claim_outputs, hold_output, option
from spag.config import Game, Play, Settings, Teacher


def register(app: typer.Typer) -> None:
    @app.command("play")
    def play_command(
        attacker: str = typer.Option(..., "--attacker", help="Attacker model: HF id, local checkpoint, or 'human'."),
        defender: str = typer.Option(..., "--defender", help="Defender model: HF id, local checkpoint, or 'human'."),
        words_file: Path = typer.Option(..., "--words", help="Target words, one per line."),
        output: Path = typer.Option(..., "-o", "--output",
                                    help="Episodes: a directory of Parquet shards, or one .parquet file."),
        backend: str = option(Play, "backend"),
        max_turns: int = option(Game, "max_turns"),
        limit: int | None = typer.Option(None, "--limit", min=1, help="Only the first N words."),
        temperature: float = option(Play, "temperature"),
        top_k: int = option(Play, "top_k"),
        max_new_tokens: int = option(Play, "max_new_tokens"),
        min_new_tokens: int = option(Play, "min_new_tokens"),
        empty_retries: int = option(Play, "empty_retries"),
        batch_size: int = option(Play, "batch_size"),
        seed: int = option(Settings, "seed"),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in OUTPUT."),
        overwrite: bool = typer.Option(False, "--overwrite",
                                       help="Replace a previous `spag play` output in OUTPUT, and an --export-json "
                                            "file spag wrote (nothing else)."),
        examples: bool = option(Teacher, "examples"),
        foul_retries: int = option(Teacher, "foul_retries"),
        coached_attacker: bool = option(Teacher, "coached_attacker"),
        final_guess: bool = option(Teacher, "final_guess"),
        guess_words: Path | None = typer.Option(None, "--guess-words",
                                                help="The vocabulary for --final-guess (default: --words)."),
        export_json: Path | None = typer.Option(None, "--export-json",
                                                   help="Also write the episodes in the original JSON list format."),
        device: str | None = option(Play, "device"),
        dtype: str = option(Play, "dtype"),
        base_url: str | None = option(Play, "base_url"),
        gpu_memory_utilization: float = option(Play, "gpu_memory_utilization"),
        api_key_env: str | None = typer.Option(
            None, "--api-key-env", help="openai backend: environment variable holding the API key for --base-url "
                                        "(default: OPENAI_API_KEY, sent to api.openai.com only)."),
        concurrency: int = typer.Option(8, "--concurrency", min=1, help="openai backend: parallel requests."),
        tensor_parallel_size: int = option(Play, "tensor_parallel_size"),
        trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Allow model code from the hub."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
        rules: str = option(Game, "rules"),
        templates: Path | None = option(Game, "templates"),
        play_prompts: str = option(Game, "play_prompts"),
        replies: str = option(Game, "replies"),
        end: str = option(Game, "end"),
        max_prompt_tokens: int | None = option(Play, "max_prompt_tokens"),
    ) -> None:
        """Play Adversarial Taboo between two models and store the judged episodes."""
        from spag.console import error, summary
        from spag.game.episodes import export_json as write_json
        from spag.io import check_distinct_paths, replace_mode
        from spag.modeling import check_model
        from spag.play import PlayStats, rank_and_world, run_games
        from spag.players import BACKENDS, PlayerError
        from spag.words import read_words

        if backend not in BACKENDS or backend == "human":
            error(f"--backend must be one of hf, vllm, openai (got {backend!r})")
            raise typer.Exit(2)
        if backend == "vllm":  # under torchrun, this rank's GPUs only: before anything looks at CUDA
            from spag.devices import pin_rank_to_gpus

            pin_rank_to_gpus(tensor_parallel_size)
        if backend != "openai":
            from spag.preflight import cuda_problem, refuse

            refuse([p for p in (cuda_problem(),) if p])
        check_distinct_paths({"--words": words_file, "--guess-words": guess_words, "--templates": templates},
                             {"-o": output, "--export-json": export_json})
        rank, world = rank_and_world()
        if export_json is not None and world > 1:  # each rank writes its own share
            export_json = export_json.with_name(f"{export_json.stem}.r{rank}{export_json.suffix}")
        claim_outputs({"--export-json": export_json}, overwrite=overwrite)  # written after the last game
        hold_output(output, f"r{rank}" if world > 1 else None)  # a second writer stops before loading a model
        words = read_words(words_file)
        if limit is not None:
            words = words[:limit]
        for model, side in ((attacker, "--attacker"), (defender, "--defender")):
            if model != "human":
                check_model(model, side, trust_remote_code)
        chosen_guess_words = read_words(guess_words) if guess_words else words
        if "human" in (attacker, defender):
            batch_size = 1  # one game at a time when a person is typing
        game = checked(Game, max_turns=max_turns, rules=rules, templates=templates, play_prompts=play_prompts,
                       replies=replies, end=end)
        player = checked(Teacher, backend=backend, dtype=dtype, device=device, base_url=base_url,
                         gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tensor_parallel_size,
                         temperature=temperature, top_k=top_k, max_new_tokens=max_new_tokens,
                         min_new_tokens=min_new_tokens, empty_retries=empty_retries, batch_size=batch_size,
                         max_prompt_tokens=max_prompt_tokens, examples=examples,
                         foul_retries=foul_retries, coached_attacker=coached_attacker, final_guess=final_guess)
        try:
            from spag.play import PlayConfig

            config = PlayConfig.from_sections(game, player, seed)
            if templates is not None:  # a bad templates file stops here, before any model is loaded
                from spag.game.prompts import load_templates

                load_templates(templates)
        except ValueError as exc:  # DataError included
            error(str(exc))
            raise typer.Exit(2)
        stats = PlayStats()
        try:
            episodes = run_games(attacker, defender, words, config, backend=backend, output=output,
                                 resume=resume, overwrite=overwrite, show_progress=progress, stats=stats,
                                 guess_words=chosen_guess_words, **player.player_options(), api_key_env=api_key_env,
                                 concurrency=concurrency, trust_remote_code=trust_remote_code)
        except PlayerError as exc:
            error(str(exc))
            raise typer.Exit(1)
        except ValueError as exc:  # e.g. --final-guess with a backend that cannot score words
            error(str(exc))
            raise typer.Exit(2)
        if export_json is not None:
            write_json(episodes, export_json, replace=replace_mode(overwrite))
        where = f"rank {rank}/{world}: " if world > 1 else ""
        summary("play", f"{where}{stats.line()} -> {output}")
