"""``spag reward`` and ``spag imitation-data``: judged episodes -> training rows."""

from __future__ import annotations

from pathlib import Path

import typer

from spag.commands.options import (
    checked,
    claim_outputs,
    from_params,
    game_from,
    game_knobs,
    given,
    knobs,
    overwrite_option,
    with_knobs,
)
from spag.config import CHIPS, Imitate, Reward
from spag.harness.claims import check_distinct_paths
from spag.runtime.console import error, summary
from spag.runtime.errors import DataError
from spag.schema import SEED_MAX

PARAMS_HELP = (
    "Take the game, reward and general-data settings from this params file (options given on the "
    "command line win)."
)
EPISODES_HELP = "Episodes: a JSON list, JSON lines, or Parquet (a file or a directory of shards)."
OUTPUT_HELP = "Rows out: .parquet or .jsonl (written atomically)."
_SFT = ("sft", "sft_limit", "sft_format")
_IMITATION_SET = ("moves", *_SFT)  # what spag imitation-data takes of the imitate section


def _fail(message: str) -> None:
    error(message)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    @app.command("reward")
    @with_knobs(knobs(Reward), game_knobs())
    def reward_command(
        ctx: typer.Context,
        episodes: Path = typer.Argument(..., help=EPISODES_HELP),
        output: Path = typer.Option(..., "-o", "--output", help=OUTPUT_HELP),
        seed: int = typer.Option(
            0, "--seed", min=0, max=SEED_MAX, help="Seed for the training-template draw and the SFT sample."
        ),
        strict: bool = typer.Option(
            False, "--strict", help="Reject the input (exit 2) if any record is bad."
        ),
        params: Path | None = typer.Option(None, "--params", help=PARAMS_HELP),
        overwrite: bool = overwrite_option(),
        **settings,
    ) -> None:
        """SPAG training rows: the winners' moves in decisive games, with decayed rewards and role weights."""
        from spag.rewards.build import build_reward_set

        settings = from_params(ctx, params, ("reward", "game"), settings)
        reward = checked(Reward, **given(settings, Reward))
        if reward.sft_limit is not None and reward.sft is None:
            _fail("--sft-limit needs --sft")
        try:
            check_distinct_paths({"EPISODES": episodes, "--params": params}, {"-o": output})
            claim_outputs({"-o": output}, overwrite=overwrite)
            game = game_from(settings)
            if reward.payoff == CHIPS and not game.for_chips:
                _fail(f"--payoff: the game {game.name} is not played for chips (use wins)")
            stats = build_reward_set(episodes, output, reward, game, seed=seed, strict=strict)
        except DataError as exc:
            _fail(str(exc))
        summary("reward", f"{stats.line()} -> {output}")

    @app.command("imitation-data")
    @with_knobs(knobs(Imitate, only=_IMITATION_SET), knobs(Reward, only=("keep_truncated",)), game_knobs())
    def imitation_command(
        ctx: typer.Context,
        episodes: Path = typer.Argument(
            ..., help=EPISODES_HELP + " Also the original project's GPT-4 episodes and its query/target file."
        ),
        output: Path = typer.Option(..., "-o", "--output", help=OUTPUT_HELP),
        seed: int = typer.Option(
            0, "--seed", min=0, max=SEED_MAX, help="Seed for the training-template draw."
        ),
        strict: bool = typer.Option(
            False, "--strict", help="Reject the input (exit 2) if any record is bad."
        ),
        params: Path | None = typer.Option(None, "--params", help=PARAMS_HELP),
        overwrite: bool = overwrite_option(),
        **settings,
    ) -> None:
        """The imitation set: a teacher's winning moves in decisive games (--moves all: every move of every
        game), both roles, reward 1."""
        from spag.rewards.build import build_imitation_set

        settings = from_params(ctx, params, ("imitate", "reward", "game"), settings)
        imitate = checked(
            Imitate, **{k: v for k, v in given(settings, Imitate).items() if k in _IMITATION_SET}
        )
        if imitate.sft_limit is not None and imitate.sft is None:
            _fail("--sft-limit needs --sft")
        try:
            check_distinct_paths({"EPISODES": episodes, "--params": params}, {"-o": output})
            claim_outputs({"-o": output}, overwrite=overwrite)
            game = game_from(settings)
            stats = build_imitation_set(
                episodes,
                output,
                imitate,
                game,
                seed=seed,
                strict=strict,
                keep_truncated=settings["keep_truncated"],
            )
        except DataError as exc:
            _fail(str(exc))
        summary("imitation-data", f"{stats.line(with_sft=imitate.sft is not None)} -> {output}")
