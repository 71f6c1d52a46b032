"""``spag play``: collect self-play episodes, one game per target word."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("play")
    def play_command(
        attacker: str = typer.Option(..., "--attacker", help="Attacker model: HF id, local checkpoint, or 'human'."),
        defender: str = typer.Option(..., "--defender", help="Defender model: HF id, local checkpoint, or 'human'."),
        words_file: Path = typer.Option(..., "--words", help="Target words, one per line."),
        output: Path = typer.Option(..., "-o", "--output",
                                    help="Episodes: a directory of Parquet shards, or one .parquet file."),
        backend: str = typer.Option("hf", "--backend", help="hf | vllm | openai"),
        max_turns: int = typer.Option(5, "--max-turns", min=1, help="Rounds per game (2 utterances each)."),
        limit: int | None = typer.Option(None, "--limit", min=1, help="Only the first N words."),
        temperature: float = typer.Option(1.2, "--temperature", min=0.0, help="Sampling temperature; 0 is greedy."),
        top_k: int = typer.Option(50, "--top-k", min=0, help="Top-k sampling (0: off)."),
        max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1, help="Longest reply, in tokens."),
        min_new_tokens: int = typer.Option(2, "--min-new-tokens", min=0, help="Shortest reply before it may end."),
        batch_size: int = typer.Option(32, "--batch-size", min=1, help="Games played together."),
        seed: int = typer.Option(0, "--seed", help="Sampling seed."),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in OUTPUT."),
        overwrite: bool = typer.Option(False, "--overwrite",
                                       help="Replace a previous `spag play` output in OUTPUT (nothing else)."),
        examples: bool = typer.Option(False, "--examples", help="Worked examples in the prompt (weak teachers)."),
        foul_retries: int = typer.Option(0, "--foul-retries", min=0,
                                         help="Teacher strategy: resample an attacker line that breaks the rules."),
        coached_attacker: bool = typer.Option(False, "--coached-attacker",
                                              help="Teacher strategy: attacker lines describe the word, blanked out."),
        final_guess: bool = typer.Option(False, "--final-guess",
                                         help="Teacher strategy (hf): the defender's last line is a dictionary guess."),
        guess_words: Path | None = typer.Option(None, "--guess-words",
                                                help="The vocabulary for --final-guess (default: --words)."),
        export_json: Path | None = typer.Option(None, "--export-json",
                                                   help="Also write the episodes in the original JSON list format."),
        device: str | None = typer.Option(None, "--device", help="hf backend: cpu, cuda, cuda:1 ..."),
        dtype: str | None = typer.Option(None, "--dtype", help="hf/vllm: float32, bfloat16, float16."),
        base_url: str | None = typer.Option(None, "--base-url", help="openai backend: endpoint URL."),
        api_key_env: str | None = typer.Option(
            None, "--api-key-env", help="openai backend: environment variable holding the API key for --base-url "
                                        "(default: OPENAI_API_KEY, sent to api.openai.com only)."),
        concurrency: int = typer.Option(8, "--concurrency", min=1, help="openai backend: parallel requests."),
        tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", min=1, help="vllm backend: GPUs per model."),
        trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Allow model code from the hub."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
        rules: str = typer.Option("whole-word", "--rules",
                                  help="The judge: whole-word, or original (the original code's substring rule)."),
        templates: Path | None = typer.Option(None, "--templates",
                                              help="Prompt templates file (format: spag/game/templates.yaml)."),
    ) -> None:
        """Play Adversarial Taboo between two models and store the judged episodes."""
        from spag.console import error, summary
        from spag.modeling import check_model
        from spag.play import PlayConfig, PlayStats, rank_and_world, run_games
        from spag.game.episodes import export_json as write_json
        from spag.players import BACKENDS, PlayerError
        from spag.words import read_words

        if backend not in BACKENDS or backend == "human":
            error(f"--backend must be one of hf, vllm, openai (got {backend!r})")
            raise typer.Exit(2)
        words = read_words(words_file)
        if limit is not None:
            words = words[:limit]
        for model, option in ((attacker, "--attacker"), (defender, "--defender")):
            if model != "human":
                check_model(model, option)
        chosen_guess_words = read_words(guess_words) if guess_words else words
        if "human" in (attacker, defender):
            batch_size = 1  # one game at a time when a person is typing
        try:
            config = PlayConfig(max_turns=max_turns, temperature=temperature, top_k=top_k,
                                max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, seed=seed,
                                batch_size=batch_size, examples=examples, foul_retries=foul_retries,
                                coached_attacker=coached_attacker, final_guess=final_guess, rules=rules,
                                templates=str(templates) if templates else None)
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
                                 guess_words=chosen_guess_words, device=device,
                                 dtype=dtype, base_url=base_url, api_key_env=api_key_env,
                                 concurrency=concurrency, tensor_parallel_size=tensor_parallel_size,
                                 trust_remote_code=trust_remote_code)
        except PlayerError as exc:
            error(str(exc))
            raise typer.Exit(1)
        except ValueError as exc:  # e.g. --final-guess with a backend that cannot score words
            error(str(exc))
            raise typer.Exit(2)
        rank, world = rank_and_world()
        if export_json is not None:
            target = export_json if world == 1 else export_json.with_name(
                f"{export_json.stem}.r{rank}{export_json.suffix}")
            write_json(episodes, target)
        where = f"rank {rank}/{world}: " if world > 1 else ""
        summary("play", f"{where}{stats.line()} -> {output}")
