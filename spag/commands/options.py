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
    return typer.Option(field.default, *(flags or (flag(name),)), help=field.description, **bounds, **extra)


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
