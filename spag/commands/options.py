"""Command-line options made from the fields of :mod:`spag.config`: the same default, help and range as
in a params file, and command-line values checked by the same schema."""

from __future__ import annotations

from typing import Any

import typer
from pydantic import BaseModel, ValidationError


def option(section: type[BaseModel], name: str, *flags: str, **extra: Any) -> Any:
    """A typer option for field ``name`` of ``section`` (flags default to ``--name-with-dashes``)."""
    field = section.model_fields[name]
    bounds = {}
    for constraint in field.metadata:
        if getattr(constraint, "ge", None) is not None:
            bounds["min"] = constraint.ge
        if getattr(constraint, "le", None) is not None:
            bounds["max"] = constraint.le
    if _text_or_null(field.annotation):
        extra.setdefault("callback", null_is_none)
    return typer.Option(field.default, *(flags or (flag(name),)), help=field.description, **bounds, **extra)


def _text_or_null(annotation: Any) -> bool:
    """A setting that is text (a path, a name) or null."""
    import typing

    args = typing.get_args(annotation)
    return type(None) in args and any(a is str or getattr(a, "__origin__", None) is str for a in args)


def null_is_none(value: Any) -> Any:
    """``null`` on the command line means what null means in a params file (no file, the default): for a
    file of that name, write ``./null``."""
    return None if value is not None and str(value) in ("null", "none") else value


OVERWRITE_HELP = "Replace an existing output file that spag wrote (nothing else is ever replaced)."


def overwrite_option() -> Any:
    """``--overwrite``: the one switch that lets a command replace a file it wrote before."""
    return typer.Option(False, "--overwrite", help=OVERWRITE_HELP)


def claim_outputs(outputs: dict[str, Any], *, overwrite: bool = False) -> dict:
    """:func:`spag.outputs.claim_files` for the running command: each file output checked by the output
    rule and locked until the command ends."""
    from spag.outputs import claim_files

    _release_when_the_command_ends()
    return claim_files(outputs, overwrite=overwrite)


def hold_output(path, part: str | None = None) -> None:
    """Lock the output ``path`` (or a part of it: :func:`spag.outputs.hold`) until the command ends."""
    from spag.outputs import hold

    _release_when_the_command_ends()
    hold(path, part)


def _release_when_the_command_ends() -> None:
    try:  # typer >= 0.20 vendors click as typer._click
        from typer._click.globals import get_current_context
    except ImportError:
        from click import get_current_context
    from spag.outputs import release_held

    ctx = get_current_context(silent=True)
    if ctx is not None and not ctx.meta.get("spag.release_held"):
        ctx.meta["spag.release_held"] = True
        ctx.call_on_close(release_held)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def checked(section: type[BaseModel], **values: Any):
    """``section`` built from command-line values, or a one-line error naming the first bad option."""
    from spag.config import describe
    from spag.console import error

    try:
        return section(**values)
    except ValidationError as exc:
        key, message = describe(exc.errors()[0], section)
        error(f"{flag(key.split('.')[0])}: {message}")
        raise typer.Exit(2) from None


def from_params(ctx: typer.Context, params, sections: dict[str, str], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a command's options by name) with those not given on the command line taken from the
    params file ``params`` (None: ``values`` as they are). ``sections`` maps an option's name to the
    params section it is read from ("reward", "game", ...); an option given on the command line wins.

    A bad params file is a one-line error naming the file and the key (exit 2).
    """
    if params is None:
        return values
    from spag.config import ParamsError, load_settings
    from spag.console import error

    try:
        settings = load_settings(params)
    except ParamsError as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    merged = dict(values)
    for name, section in sections.items():
        source = ctx.get_parameter_source(name)  # an enum of click's (vendored by typer or not)
        if getattr(source, "name", None) != "COMMANDLINE":
            merged[name] = getattr(getattr(settings, section), name)
    return merged
