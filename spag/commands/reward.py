"""``spag reward`` and ``spag imitation-data``: judged episodes -> training rows."""

from __future__ import annotations

from pathlib import Path

import typer

from spag.commands.options import checked, claim_outputs, from_params, option, overwrite_option
from spag.config import Game, Imitate, Reward

PARAMS_HELP = ("Take the game, reward and templates settings from this params file (options given on the "
               "command line win).")
# Options read from a params file with --params, and the section each comes from.
REWARD_SETTINGS = {"decay": "reward", "sft": "reward", "sft_limit": "reward", "sft_format": "reward",
                   "foul_penalty": "reward", "loser_reward": "reward", "role_baseline": "reward",
                   "credit": "reward", "keep_truncated": "reward", "rules": "game", "templates": "game", "row_prompts": "game"}
IMITATION_SETTINGS = {"sft": "imitate", "sft_limit": "imitate", "sft_format": "imitate",
                      "keep_truncated": "reward", "rules": "game", "templates": "game", "row_prompts": "game"}

EPISODES_HELP = "Episodes: a JSON list, JSON lines, or Parquet (a file or a directory of shards)."
OUTPUT_HELP = "Rows out: .parquet or .jsonl (written atomically)."


def _check_rules_and_templates(rules: str, templates: Path | None) -> None:
    from spag.game.prompts import load_templates

    checked(Game, rules=rules)  # the schema's choices and message, as for a params file
    if templates is not None:
        load_templates(templates)  # DataError names the file and the key


def _fail(message: str) -> None:
    from spag.console import error

    error(message)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    @app.command("reward")
    def reward_command(
        ctx: typer.Context,
        episodes: Path = typer.Argument(..., help=EPISODES_HELP),
        output: Path = typer.Option(..., "-o", "--output", help=OUTPUT_HELP),
        decay: float = option(Reward, "decay"),
        sft: str | None = option(Reward, "sft"),
        sft_limit: int | None = option(Reward, "sft_limit"),
        seed: int = typer.Option(0, "--seed", help="Seed for the training-template draw and the SFT sample."),
        strict: bool = typer.Option(
            False, "--strict", help="Reject the input (exit 2) if any record is bad."
        ),
        foul_penalty: float = option(Reward, "foul_penalty"),
        loser_reward: float = option(Reward, "loser_reward"),
        role_baseline: bool = option(Reward, "role_baseline"),
        credit: str = option(Reward, "credit"),
        rules: str = option(Game, "rules"),
        templates: Path | None = option(Game, "templates"),
        keep_truncated: bool = option(Reward, "keep_truncated"),
        row_prompts: str = option(Game, "row_prompts"),
        sft_format: str = option(Reward, "sft_format"),
        params: Path | None = typer.Option(None, "--params", help=PARAMS_HELP),
        overwrite: bool = overwrite_option(),
    ) -> None:
        """SPAG training rows: the winners' moves in decisive games, with decayed rewards and role weights."""
        from spag.console import summary
        from spag.io import DataError, check_distinct_paths, replace_mode
        from spag.rewards import RewardOptions, build_reward_set

        given = {name: value for name, value in locals().items() if name in REWARD_SETTINGS}
        s = from_params(ctx, params, REWARD_SETTINGS, given)
        decay, sft, sft_limit, sft_format, foul_penalty, loser_reward, role_baseline, keep_truncated, credit = (
            s["decay"], s["sft"], s["sft_limit"], s["sft_format"], s["foul_penalty"], s["loser_reward"],
            s["role_baseline"], s["keep_truncated"], s["credit"])
        rules, templates, row_prompts = s["rules"], s["templates"], s["row_prompts"]
        checked(Game, rules=rules, row_prompts=row_prompts)
        checked(Reward, sft_format=sft_format)
        if sft_limit is not None and sft is None:
            _fail("--sft-limit needs --sft")
        checked(Reward, decay=decay, foul_penalty=foul_penalty, loser_reward=loser_reward, credit=credit)
        options = RewardOptions(decay=decay, foul_penalty=foul_penalty, loser_reward=loser_reward,
                                role_baseline=role_baseline, keep_truncated=keep_truncated, credit=credit)
        try:
            check_distinct_paths({"EPISODES": episodes, "--params": params}, {"-o": output})
            claim_outputs({"-o": output}, overwrite=overwrite)
            _check_rules_and_templates(rules, templates)
            stats = build_reward_set(
                episodes, output, sft=sft, seed=seed, strict=strict, sft_limit=sft_limit,
                options=options, rules=rules, templates=templates, row_prompts=row_prompts, sft_format=sft_format,
                replace=replace_mode(overwrite),
            )
        except DataError as exc:
            _fail(str(exc))
        summary("reward", f"{stats.line()} -> {output}")

    @app.command("imitation-data")
    def imitation_command(
        ctx: typer.Context,
        episodes: Path = typer.Argument(
            ..., help=EPISODES_HELP + " Also the original project's GPT-4 episodes and its query/target file."
        ),
        output: Path = typer.Option(..., "-o", "--output", help=OUTPUT_HELP),
        seed: int = typer.Option(0, "--seed", help="Seed for the training-template draw."),
        strict: bool = typer.Option(
            False, "--strict", help="Reject the input (exit 2) if any record is bad."
        ),
        rules: str = option(Game, "rules"),
        templates: Path | None = option(Game, "templates"),
        sft: str | None = option(Imitate, "sft"),
        sft_limit: int | None = option(Imitate, "sft_limit"),
        keep_truncated: bool = option(Reward, "keep_truncated"),
        row_prompts: str = option(Game, "row_prompts"),
        sft_format: str = option(Imitate, "sft_format"),
        params: Path | None = typer.Option(None, "--params", help=PARAMS_HELP),
        overwrite: bool = overwrite_option(),
    ) -> None:
        """The imitation set: a teacher's winning moves in decisive games, both roles, reward 1."""
        from spag.console import summary
        from spag.io import DataError, check_distinct_paths, replace_mode
        from spag.rewards import build_imitation_set

        given = {name: value for name, value in locals().items() if name in IMITATION_SETTINGS}
        s = from_params(ctx, params, IMITATION_SETTINGS, given)
        sft, sft_limit, sft_format, keep_truncated = s["sft"], s["sft_limit"], s["sft_format"], s["keep_truncated"]
        rules, templates, row_prompts = s["rules"], s["templates"], s["row_prompts"]
        checked(Game, rules=rules, row_prompts=row_prompts)
        checked(Imitate, sft_format=sft_format)
        if sft_limit is not None and sft is None:
            _fail("--sft-limit needs --sft")
        try:
            check_distinct_paths({"EPISODES": episodes, "--params": params}, {"-o": output})
            claim_outputs({"-o": output}, overwrite=overwrite)
            _check_rules_and_templates(rules, templates)
            stats = build_imitation_set(episodes, output, seed=seed, strict=strict, sft=sft, sft_limit=sft_limit,
                                        rules=rules, templates=templates, keep_truncated=keep_truncated,
                                        row_prompts=row_prompts, sft_format=sft_format,
                                        replace=replace_mode(overwrite))
        except DataError as exc:
            _fail(str(exc))
        summary("imitation-data", f"{stats.line(with_sft=sft is not None)} -> {output}")
