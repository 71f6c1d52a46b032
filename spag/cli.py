"""The ``spag`` command: one thin subcommand per step of the loop.

Each step lives in ``spag/commands/<name>.py`` with a ``register(app)`` function; heavy libraries are
imported inside the command bodies so that ``spag --help`` stays fast.
"""

from __future__ import annotations

import importlib
import sys

import typer

from spag.io import DataError

COMMAND_MODULES = (
    "words",
    "judge",
    "base_model",
    "play",
    "reward",
    "train",
    "evaluate",
    "analyze",
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="SPAG: self-play of Adversarial Taboo to improve LLM reasoning.",
    pretty_exceptions_enable=False,
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"spag.commands.{_name}").register(app)


def main() -> None:
    try:
        app()
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
