"""``spag reward`` and ``spag imitation-data``: judged episodes -> training rows."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

EPISODES_HELP = "Episodes: a JSON list, JSON lines, or Parquet (a file or a directory of shards)."
OUTPUT_HELP = "Rows out: .parquet or .jsonl (written atomically)."
RULES_HELP = "The judge: whole-word, or original (the original code's substring rule)."
TEMPLATES_HELP = "Prompt templates file for the rows (format: spag/game/templates.yaml)."
KEEP_TRUNCATED_HELP = ("Also learn from empty utterances and those cut at max_new_tokens "
                       "(left out by default and counted in the summary).")


def _check_rules_and_templates(rules: str, templates: Optional[Path]) -> None:
    from spag.game.prompts import load_templates
    from spag.game.rules import RULE_SETS

    if rules not in RULE_SETS:
        _fail(f"--rules must be one of {', '.join(RULE_SETS)}, got {rules!r}")
    if templates is not None:
        load_templates(templates)  # DataError names the file and the key


def _fail(message: str) -> None:
    from spag.console import error

    error(message)
    raise typer.Exit(2)


def _require_episodes(path: Path) -> None:
    """An empty input is a mistake (a wrong path, a stage that played nothing): say so, write nothing."""
    from spag.io import DataError, read_records

    if not read_records(path):
        raise DataError(path, None, "holds no episodes")


def register(app: typer.Typer) -> None:
    @app.command("reward")
    def reward_command(
        episodes: Path = typer.Argument(..., help=EPISODES_HELP),
        output: Path = typer.Option(..., "-o", "--output", help=OUTPUT_HELP),
        decay: float = typer.Option(
            0.8, "--decay", help="Reward decay d: the k-th winning move gets (1/d)^k."
        ),
        sft: Optional[str] = typer.Option(
            None,
            "--sft",
            help="General instruction data to mix in (Alpaca, prompt/completion or query/target rows), "
            "or 'builtin' for the small set shipped with spag.",
        ),
        sft_limit: Optional[int] = typer.Option(None, "--sft-limit", min=0, help="Keep a random N SFT rows."),
        seed: int = typer.Option(0, "--seed", help="Seed for the training-template draw and the SFT sample."),
        strict: bool = typer.Option(
            False, "--strict", help="Reject the input (exit 2) if any record is bad."
        ),
        foul_penalty: float = typer.Option(
            0.0, "--foul-penalty", help="p >= 0: the attacker line that says the word gets reward -p (0: off)."),
        loser_reward: float = typer.Option(
            0.0, "--loser-reward", help="q <= 0: the loser's lines get rewards summing to q per game (0: off)."),
        role_baseline: bool = typer.Option(
            False, "--role-baseline", help="Subtract each role's mean reward from its rows' rewards."),
        rules: str = typer.Option("whole-word", "--rules", help=RULES_HELP),
        templates: Optional[Path] = typer.Option(None, "--templates", help=TEMPLATES_HELP),
        keep_truncated: bool = typer.Option(False, "--keep-truncated", help=KEEP_TRUNCATED_HELP),
    ) -> None:
        """SPAG training rows: the winners' moves in decisive games, with decayed rewards and role weights."""
        from spag.console import summary
        from spag.io import DataError
        from spag.rewards import RewardOptions, build_reward_set

        if sft_limit is not None and sft is None:
            _fail("--sft-limit needs --sft")
        try:
            options = RewardOptions(decay=decay, foul_penalty=foul_penalty, loser_reward=loser_reward,
                                    role_baseline=role_baseline, keep_truncated=keep_truncated)
        except ValueError as exc:
            _fail(f"--{str(exc).replace('_', '-')}")
        try:
            _check_rules_and_templates(rules, templates)
            _require_episodes(episodes)
            stats = build_reward_set(
                episodes, output, decay=decay, sft=sft, seed=seed, strict=strict, sft_limit=sft_limit,
                options=options, rules=rules, templates=templates,
            )
        except DataError as exc:
            _fail(str(exc))
        summary("reward", f"{stats.line()} -> {output}")

    @app.command("imitation-data")
    def imitation_command(
        episodes: Path = typer.Argument(
            ..., help=EPISODES_HELP + " Also the original project's GPT-4 episodes and its query/target file."
        ),
        output: Path = typer.Option(..., "-o", "--output", help=OUTPUT_HELP),
        seed: int = typer.Option(0, "--seed", help="Seed for the training-template draw."),
        strict: bool = typer.Option(
            False, "--strict", help="Reject the input (exit 2) if any record is bad."
        ),
        rules: str = typer.Option("whole-word", "--rules", help=RULES_HELP),
        templates: Optional[Path] = typer.Option(None, "--templates", help=TEMPLATES_HELP),
        sft: Optional[str] = typer.Option(
            None, "--sft", help="General instruction data to mix in (a file or 'builtin'); none by default, "
                                "as in the original."),
        sft_limit: Optional[int] = typer.Option(None, "--sft-limit", min=0, help="Keep a random N SFT rows."),
        keep_truncated: bool = typer.Option(False, "--keep-truncated", help=KEEP_TRUNCATED_HELP),
    ) -> None:
        """The imitation set: a teacher's winning moves in decisive games, both roles, reward 1."""
        from spag.console import summary
        from spag.io import DataError
        from spag.rewards import build_imitation_set

        if sft_limit is not None and sft is None:
            _fail("--sft-limit needs --sft")
        try:
            _check_rules_and_templates(rules, templates)
            _require_episodes(episodes)
            stats = build_imitation_set(episodes, output, seed=seed, strict=strict, sft=sft, sft_limit=sft_limit,
                                        rules=rules, templates=templates, keep_truncated=keep_truncated)
        except DataError as exc:
            _fail(str(exc))
        summary("imitation-data", f"{stats.line(with_sft=sft is not None)} -> {output}")
