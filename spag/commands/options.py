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
