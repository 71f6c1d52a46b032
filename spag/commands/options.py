"""Command-line options made from the fields of :mod:`spag.config`: the same default, help and range as
in a params file, and command-line values checked by the same schema.

A command declares its own arguments (paths, switches of the command itself) in its signature and takes
its settings from the schema with :func:`with_knobs`: one option per field of the sections it names, each
with the field's name, default, range and help; the command receives them as keyword arguments and builds
the validated sections from them (:func:`checked`). So adding a setting to a section adds its option to
every command that takes the section.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal, Optional, Union

import typer
from pydantic import BaseModel, ValidationError
from typer._click.globals import get_current_context

from spag.config import describe, load_settings
from spag.game.registry import DEFAULT_GAME, GAME_CHOICES, GAMES
from spag.harness.claims import claim_files, hold, release_held
from spag.runtime.console import error
from spag.runtime.errors import ParamsError, SettingError

_UNSET_HELP = " Default: the game's."


def option(section: type[BaseModel], name: str, *flags: str, default: Any = ..., **extra: Any) -> Any:
    """A typer option for field ``name`` of ``section`` (flags default to ``--name-with-dashes``; a boolean
    that is on by default also gets ``--no-name``). ``default``: instead of the field's (None: a value the
    command fills in, from the game or a params file)."""
    field = section.model_fields[name]
    bounds = {}
    for constraint in field.metadata:
        if getattr(constraint, "ge", None) is not None:
            bounds["min"] = constraint.ge
        if getattr(constraint, "le", None) is not None:
            bounds["max"] = constraint.le
    if _text_or_null(field.annotation):
        extra.setdefault("callback", null_is_none)
    value = field.default if default is ... else default
    if not flags:
        flags = (f"{flag(name)}/--no-{flag(name)[2:]}",) if field.default is True else (flag(name),)
    return typer.Option(value, *flags, help=field.description, **bounds, **extra)


def cli_type(annotation: Any) -> Any:
    """The type a command line gives a field of this annotation (a choice is text, checked by the schema),
    or None for a field a command line cannot give (a list, a mapping, a section)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return cli_type(args[0])
    if origin in (Union, types.UnionType):
        inner = [cli_type(a) for a in args if a is not type(None)]
        return Optional[inner[0]] if len(inner) == 1 and inner[0] is not None else None  # noqa: UP045
    if origin is Literal:
        return type(args[0])
    return annotation if annotation in (bool, int, float, str) else None


def knobs(
    section: type[BaseModel],
    *,
    only: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    flags: Mapping[str, tuple[str, ...]] | None = None,
    unset: bool = False,
) -> dict[str, tuple]:
    """``{name: (type, typer option)}`` for the fields of ``section`` a command line can give (those of
    ``only``, none of ``exclude``). ``unset``: the options default to None, the command then taking the
    value from elsewhere (the game's defaults: its settings and strategies differ from game to game)."""
    out = {}
    for name, field in section.model_fields.items():
        kind = cli_type(field.annotation)
        if kind is None or name in exclude or (only is not None and name not in only):
            continue
        if unset:
            kind = Optional[kind]  # noqa: UP045
            made = option(section, name, *(flags or {}).get(name, ()), default=None)
            made.help = (made.help or "") + _UNSET_HELP
        else:
            made = option(section, name, *(flags or {}).get(name, ()))
        out[name] = (kind, made)
    return out


def with_knobs(*groups: dict[str, tuple]) -> Callable:
    """Decorate a command whose settings are the options of ``groups`` (:func:`knobs`): its signature, as
    typer reads it, is its own parameters followed by one keyword option per knob not already there; the
    command takes them with ``**knobs``."""

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in own}
        added = {}
        for group in groups:
            for name, (kind, made) in group.items():
                if name not in taken and name not in added:
                    added[name] = inspect.Parameter(
                        name, inspect.Parameter.KEYWORD_ONLY, default=made, annotation=kind
                    )
        parameters = own + list(added.values())
        command.__signature__ = signature.replace(parameters=parameters)
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        return command

    return decorate


def given(values: Mapping[str, Any], section: type[BaseModel]) -> dict[str, Any]:
    """The values of ``section``'s fields among a command's options that were set (not None)."""
    return {name: values[name] for name in section.model_fields if values.get(name) is not None}


def _text_or_null(annotation: Any) -> bool:
    """A setting that is text (a path, a name) or null."""
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
    """:func:`spag.harness.claims.claim_files` for the running command: each file output checked by the output
    rule and locked until the command ends."""
    _release_when_the_command_ends()
    return claim_files(outputs, overwrite=overwrite)


def hold_output(path, part: str | None = None) -> None:
    """Lock the output ``path`` (or a part of it: :func:`spag.harness.claims.hold`) until the command ends."""
    _release_when_the_command_ends()
    hold(path, part)


def _release_when_the_command_ends() -> None:
    ctx = get_current_context(silent=True)
    if ctx is not None and not ctx.meta.get("spag.release_held"):
        ctx.meta["spag.release_held"] = True
        ctx.call_on_close(release_held)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def checked(section: type[BaseModel], **values: Any):
    """``section`` built from command-line values, or a one-line error naming the first bad option."""
    try:
        return section(**values)
    except ValidationError as exc:
        key, message = describe(exc.errors()[0], section)
        error(f"{flag(key.split('.')[0])}: {message}")
        raise typer.Exit(2) from None


def from_params(
    ctx: typer.Context, params, sections: Iterable[str], values: dict[str, Any]
) -> dict[str, Any]:
    """``values`` (a command's options by name) with those not given on the command line taken from the
    params file ``params`` (None: ``values`` as they are): the fields of each of its ``sections`` ("reward",
    "imitate", ...; "game": the game's name as ``game`` and its settings). An option given on the command
    line wins.

    A bad params file is a one-line error naming the file and the key (exit 2).
    """
    if params is None:
        return values

    try:
        settings = load_settings(params)
    except ParamsError as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    merged = dict(values)
    for section in sections:
        fields = getattr(settings, section).model_dump()
        if section == "game":
            fields["game"] = fields.pop("name")
        for name, value in fields.items():
            source = ctx.get_parameter_source(name)  # an enum of click's (vendored by typer or not)
            if name in values and getattr(source, "name", None) != "COMMANDLINE":
                merged[name] = value
    return merged


# ---------------------------------------------------------------------------------- the game's settings


def game_knobs() -> dict[str, tuple]:
    """``--game`` and the settings of every game, each defaulting to the chosen game's (:func:`game_from`)."""
    out = {"game": (str, typer.Option(DEFAULT_GAME, "--game", help=f"The game: {GAME_CHOICES}."))}
    for game in GAMES.values():
        out.update(
            {k: v for k, v in knobs(game.Settings, exclude=("name",), unset=True).items() if k not in out}
        )
    return out


def strategy_knobs() -> dict[str, tuple]:
    """The strategies of every game (:func:`strategies_from`), off unless given."""
    out: dict[str, tuple] = {}
    for game in GAMES.values():
        out.update({k: v for k, v in knobs(game.Strategies, unset=True).items() if k not in out})
    return out


def _own(values: Mapping[str, Any], section: type[BaseModel], everyone: Iterable[str], game: str) -> dict:
    """The given values of ``section``'s fields; a one-line error (exit 2) for a value given to a field of
    ``everyone`` (every game's) that ``section`` (the chosen game's) does not have."""
    foreign = [
        name
        for name in everyone
        if name != "game" and values.get(name) is not None and name not in section.model_fields
    ]
    if foreign:
        error(f"{flag(foreign[0])}: the game {game} has no such setting")
        raise typer.Exit(2)
    return given(values, section)


def game_from(values: Mapping[str, Any], **fixed: Any):
    """The game a command's options choose (``--game``) with the settings they give over its defaults (and
    ``fixed``); a one-line error naming the option otherwise (exit 2)."""
    name = values.get("game") or fixed.get("name")
    if name not in GAMES:
        error(f"--game: {name!r} is not one of {', '.join(GAMES)}")
        raise typer.Exit(2)
    cls = GAMES[name]
    settings = checked(
        cls.Settings, **{**_own(values, cls.Settings, game_knobs(), name), **fixed, "name": name}
    )
    try:
        return cls(settings)
    except SettingError as exc:  # a setting the game refuses
        error(f"{flag(exc.key)}: {exc.message}")
        raise typer.Exit(2) from None


def strategies_from(values: Mapping[str, Any], game):
    """The ``game``'s strategies the options turn on (exit 2 for one of another game)."""
    return checked(game.Strategies, **_own(values, game.Strategies, strategy_knobs(), game.name))
