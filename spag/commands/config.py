"""``spag config check`` and ``spag config show``: params files against the settings schema (spag.config)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from spag.config import Settings, load_settings, to_yaml
from spag.runtime.console import error, summary


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(no_args_is_help=True, help="Check a params file, or show resolved settings.")
    app.add_typer(config_app, name="config")

    @config_app.command("check")
    def check_command(
        file: Path = typer.Argument(..., help="A params file (params.yaml, configs/paper.yaml, ...)."),
    ) -> None:
        """Validate every key of a params file: unknown keys, types, ranges and choices."""
        try:
            settings = load_settings(file)
        except ValueError as exc:
            error(str(exc))
            raise typer.Exit(2)
        sections = [name for name, field in Settings.model_fields.items() if name in settings.model_fields_set]
        summary("config check", f"{file}: valid ({len(sections)} of {len(Settings.model_fields)} sections set, "
                                f"{len(settings.spag.epochs)} SPAG epochs)")

    @config_app.command("show")
    def show_command(
        file: Path | None = typer.Argument(
            None, help="A params file (default: ./params.yaml when there is one, else the schema's defaults)."),
        comments: bool = typer.Option(True, "--comments/--no-comments", help="Each key's help as a comment."),
        override: list[Path] | None = typer.Option(
            None, "--override", help="A file of `section.key: value` lines, each replacing that setting of "
                                     "FILE whole (e.g. configs/paper-toy.yaml); repeat to apply several."),
    ) -> None:
        """Print the resolved settings (the file's values, the defaults for the keys it leaves out) as YAML.

        With --override, the result is a params file:
        `spag config show configs/paper.yaml --override configs/paper-toy.yaml > params.yaml`.
        """
        if file is None and Path("params.yaml").is_file():
            file = Path("params.yaml")
        try:
            settings = Settings() if not (file or override) else load_settings(file, override or ())
        except ValueError as exc:
            error(str(exc))
            raise typer.Exit(2)
        sys.stdout.write(to_yaml(settings, comments=comments))
        shown = f"settings of {file}" if file is not None else "the schema's defaults"
        summary("config show", shown + "".join(f", {path} applied" for path in override or ()))
