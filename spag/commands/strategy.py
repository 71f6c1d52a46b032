"""``spag strategy``: a model's Kuhn poker strategy at every information set, and its exploitability."""

from __future__ import annotations

from pathlib import Path

import typer

from spag.commands.options import (
    checked,
    from_params,
    game_from,
    game_knobs,
    given,
    hold_output,
    knobs,
    option,
    overwrite_option,
    with_knobs,
)
from spag.config import Evaluate, Sampling, load_settings
from spag.evaluate.strategy import (
    FIGURES,
    ROWS,
    STRATEGY_FILES,
    WAYS,
    exploitability_report,
    profile_of,
    read_strategy_rows,
    strategy_line,
    strategy_of,
    strategy_table,
    write_strategy,
)
from spag.game.kuhn.exploitability import all_figures
from spag.harness.claims import check_distinct_paths, claim_output_dir
from spag.harness.folders import mark_output_dir
from spag.harness.rule import claim_file, replace_mode
from spag.models.loading import check_model
from spag.play.engine import PlayConfig
from spag.players import close_player, load_player
from spag.runtime.console import error, summary
from spag.runtime.errors import DataError

KIND = "strategy"
PARAMS_HELP = (
    "Take the game and evaluation settings (evaluate: sampling, seed) from this params file (options "
    "given on the command line win)."
)


def _fail(message: str) -> None:
    error(message)
    raise typer.Exit(2)


def _settings(ctx: typer.Context, params: Path | None, values: dict):
    """The PlayConfig of the evaluation games and the hf player's options, from the options and ``params``;
    a one-line error (exit 2) for a game other than Kuhn poker."""
    values = from_params(ctx, params, ("evaluate", "game"), values)
    if values["game"] != "kuhn-poker":
        where = (
            f"{params}: game.name"
            if params is not None and ctx.get_parameter_source("game").name != "COMMANDLINE"
            else "--game"
        )
        _fail(f"{where}: {values['game']!r}: spag strategy reads a Kuhn poker strategy (kuhn-poker) only")
    if values["temperature"] is None and params is not None:  # evaluate.temperature null: play's
        values["temperature"] = load_settings(params).play.temperature
    section = checked(Evaluate, **given(values, Evaluate))
    return (
        PlayConfig(game_from(values), section, section.seed),
        section.player_options("hf"),
        section.strategy_samples,
    )


def register(app: typer.Typer) -> None:
    @app.command("strategy")
    @with_knobs(
        knobs(Evaluate, only=(*Sampling.model_fields, "seed"), exclude=("temperature", "backend")),
        game_knobs(),
    )
    def strategy_command(
        ctx: typer.Context,
        model: str = typer.Argument(
            ...,
            help=f"The model (HF dir or name), played on the hf backend; or a {ROWS} "
            "(or the folder spag strategy wrote it to): its table is printed.",
        ),
        output: Path | None = typer.Option(
            None, "-o", "--output", help=f"Folder for {ROWS} and {FIGURES} (needed with a model)."
        ),
        strategy_samples: int = option(Evaluate, "strategy_samples", "--samples"),
        game: str = typer.Option(
            "kuhn-poker", "--game", help="The game: kuhn-poker (no other has a strategy here)."
        ),
        temperature: float = option(Evaluate, "temperature"),
        params: Path | None = typer.Option(None, "--params", help=PARAMS_HELP),
        overwrite: bool = overwrite_option(),
        **settings,
    ) -> None:
        """The probability of the aggressive action (bet, or call facing a bet) at each of Kuhn poker's 12
        information sets, exactly (the canonical replies' probabilities) and as played (sampled replies at the
        evaluation settings), and each way's exploitability and values in chips and in wins."""
        if _is_strategy(model):
            _show(model)
            return
        if output is None:
            _fail(
                "-o: give the folder for the strategy's files (or give a strategy.jsonl as MODEL to print it)"
            )
        config, options, samples = _settings(
            ctx,
            params,
            {**settings, "game": game, "temperature": temperature, "strategy_samples": strategy_samples},
        )
        check_distinct_paths({"MODEL": model, "--params": params}, {"-o": output})
        check_model(model, "MODEL", trust_remote_code=None)
        hold_output(output)  # one writer at a time
        target = claim_output_dir(output, KIND, overwrite=overwrite)
        for name in STRATEGY_FILES:  # both, before any sampling: new rows never stand beside old figures
            claim_file(target / name, name, replace_mode(overwrite))
        player = load_player(model, "hf", **options)
        try:
            rows, figures = strategy_of(player, config, samples, show_progress=True)
        finally:
            close_player(player)
        mark_output_dir(target, KIND)
        report = exploitability_report(rows, figures)
        write_strategy(target, rows, report)
        print(strategy_table(rows))
        summary("strategy", f"{model}: {strategy_line(report)} -> {output}")


def _is_strategy(model: str) -> bool:
    """Whether MODEL names a strategy spag strategy wrote (a strategy.jsonl, or a folder with one and no model)."""
    path = Path(model)
    return (path.is_file() and path.suffix == ".jsonl") or (
        path.is_dir() and (path / ROWS).is_file() and not (path / "config.json").exists()
    )


def _show(model: str) -> None:
    """Print a written strategy's table and its exact figures."""
    try:
        rows = read_strategy_rows(model)
    except DataError as exc:
        _fail(str(exc))
    ways = sorted({r["way"] for r in rows}, key=WAYS.index)
    figures = {way: all_figures(profile_of(rows, way))["chips"]["exploitability"] for way in ways}
    print(strategy_table(rows))
    summary(
        "strategy", f"{model}: chips exploitability " + ", ".join(f"{w} {v:.3f}" for w, v in figures.items())
    )
