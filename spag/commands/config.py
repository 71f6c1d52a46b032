"""``spag config check`` and ``spag config show``: params files against the settings schema (spag.config)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from spag.config import Settings, load_settings, to_yaml
from spag.evaluate.benchmark import check_tasks
from spag.harness.rule import claim_file
from spag.pipeline.dvcyaml import HEADER, render
from spag.pipeline.preflight import launcher_problems
from spag.runtime.atomic import write_text_atomic
from spag.runtime.console import error, summary
from spag.runtime.errors import BenchmarkError, ParamsError


def _is_one_of(path: Path, inputs: list[Path]) -> bool:
    """Whether ``path`` is the same file as one of ``inputs`` (through links and other spellings)."""
    if not path.exists():
        return False
    return any(other.exists() and os.path.samefile(path, other) for other in inputs)


LAUNCHERS = ("play", "imitate", "spag")  # the sections with a launcher


def _check_launchers(settings: Settings, file: Path) -> None:
    """Each launcher a command line whose program is installed here (the GPU count is the machine's: the
    preflight checks it where the run starts)."""
    for section in LAUNCHERS:
        problems = launcher_problems(
            f"{section}.launcher", getattr(settings, section).launcher, gpus=0, source=str(file)
        )
        if problems:
            raise ParamsError(file, f"{section}.launcher", problems[0].message)


def _rewrite_pipeline(root: Path, settings: Settings) -> bool:
    """Rewrite ``root/dvc.yaml`` (only one spag wrote, by its header) where these settings' backends change
    the stages' dependencies (:mod:`spag.pipeline.dvcyaml`); True if it was rewritten."""
    path = root / "dvc.yaml"
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        return False
    if not current.startswith(HEADER):
        return False
    text = render(settings)
    if text == current:
        return False
    write_text_atomic(path, text)  # spag's own file (its header)
    return True


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(no_args_is_help=True, help="Check a params file, or show resolved settings.")
    app.add_typer(config_app, name="config")

    @config_app.command("check")
    def check_command(
        file: Path = typer.Argument(..., help="A params file (params.yaml, configs/paper.yaml, ...)."),
    ) -> None:
        """Validate every key of a params file: unknown keys, types, ranges and choices, and the benchmark
        tasks it names."""
        try:
            settings = load_settings(file)
            bench = settings.evaluate.benchmark
            try:
                check_tasks(bench.suite, bench.tasks)
            except BenchmarkError as exc:
                raise ParamsError(file, "evaluate.benchmark.tasks", str(exc)) from None
            _check_launchers(settings, file)
        except ValueError as exc:
            error(str(exc))
            raise typer.Exit(2)
        sections = [
            name for name, field in Settings.model_fields.items() if name in settings.model_fields_set
        ]
        summary(
            "config check",
            f"{file}: valid ({len(sections)} of {len(Settings.model_fields)} sections set, "
            f"{len(settings.spag.epochs)} SPAG epochs)",
        )

    @config_app.command("show")
    def show_command(
        file: Path | None = typer.Argument(
            None, help="A params file (default: ./params.yaml when there is one, else the schema's defaults)."
        ),
        comments: bool = typer.Option(True, "--comments/--no-comments", help="Each key's help as a comment."),
        override: list[Path] | None = typer.Option(
            None,
            "--override",
            help="A file of `section.key: value` lines, each replacing that setting of "
            "FILE whole (e.g. configs/paper-toy.yaml); repeat to apply several.",
        ),
        output: Path | None = typer.Option(
            None,
            "-o",
            "--output",
            help="Write the settings to this file instead of printing them: after every "
            "input is read, atomically. It may be one of the inputs (replaced in "
            "place); another existing file needs --overwrite.",
        ),
        overwrite: bool = typer.Option(
            False,
            "--overwrite",
            help="Replace an existing -o file that is not one of the inputs (what it held is not kept).",
        ),
    ) -> None:
        """Print the resolved settings (the file's values, the defaults for the keys it leaves out) as YAML.

        With --override, the result is a params file:
        `spag config show params.yaml --override configs/kuhn-poker.yaml -o params.yaml` (never
        `> params.yaml`: the shell empties the file before spag reads it).
        """
        if file is None and Path("params.yaml").is_file():
            file = Path("params.yaml")
        inputs = [p for p in (file, *(override or ())) if p is not None]
        try:
            replace = "no"
            if output is not None:
                replace = "any" if overwrite or _is_one_of(output, inputs) else "no"
                claim_file(output, "-o", replace)
            settings = Settings() if not (file or override) else load_settings(file, override or ())
            text = to_yaml(settings, comments=comments)
            if output is not None:
                write_text_atomic(output, text)
        except ValueError as exc:
            error(str(exc))
            raise typer.Exit(2)
        if output is None:
            sys.stdout.write(text)
        shown = f"settings of {file}" if file is not None else "the schema's defaults"
        written = f" -> {output}" if output is not None else ""
        if output is not None and output.name == "params.yaml" and _rewrite_pipeline(output.parent, settings):
            written += f", {output.parent / 'dvc.yaml'} rewritten for its backends"
        summary("config show", shown + "".join(f", {path} applied" for path in override or ()) + written)
