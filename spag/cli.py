"""The ``spag`` command: one thin subcommand per step of the loop.

Each step lives in ``spag/commands/<name>.py`` with a ``register(app)`` function; heavy libraries (torch,
transformers, lm-eval, vLLM) are imported inside the functions that use them, so that ``spag --help``
stays fast.

Exit codes: 0 done; 1 a backend failed (e.g. a model endpoint); 2 bad input or options (one line on
stderr naming the file or option, never a traceback); 130 interrupted (Ctrl-C), 143 terminated
(SIGTERM). An interrupted or terminated run first writes the games it finished (see :mod:`spag.play.engine`).
"""

from __future__ import annotations

import sys

import typer
from typer._click import exceptions as click  # typer vendors click (the locks pin typer)

from spag import __version__
from spag.commands import (
    analyze,
    base_model,
    config,
    evaluate,
    judge,
    play,
    prompt,
    reward,
    strategy,
    train,
    words,
)
from spag.harness.allocator import keep_freed_memory
from spag.harness.claims import release_held
from spag.harness.process import end_process, leave_process_group_at_exit, short_lived_process
from spag.harness.rule import enforce
from spag.runtime.errors import DataError
from spag.runtime.signals import EXIT_INTERRUPTED, STOPS, command_signals, stopped

# The subcommand modules, in the order `spag --help` lists them.
COMMAND_MODULES = (words, judge, base_model, play, prompt, reward, train, evaluate, strategy, analyze, config)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="SPAG: self-play of a language game (Adversarial Taboo, Kuhn poker) to improve LLM reasoning.",
    pretty_exceptions_enable=False,
)

for _module in COMMAND_MODULES:
    _module.register(app)


def _print_version(value: bool) -> None:
    if value:
        print(f"spag {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print spag's version and exit."
    ),
) -> None:
    """SPAG: self-play of a language game (Adversarial Taboo, Kuhn poker) to improve LLM reasoning."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def main(argv: list[str] | None = None) -> None:
    keep_freed_memory()  # the command owns its process: freed memory is kept for reuse (CPU inference)
    short_lived_process()  # and collects garbage after 50,000 new objects, not 700 (spag.harness.process)
    enforce()  # the output rule watches every write (spag.harness.rule)
    try:
        # A scheduler's (or `timeout`'s) SIGTERM unwinds like Ctrl-C: finished work is written first.
        with command_signals():
            code = app(args=argv, prog_name="spag", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else str(exc), file=sys.stderr)
        code = 2
    except click.ClickException as exc:
        print(f"error: {_one_line(exc.format_message())}", file=sys.stderr)
        code = exc.exit_code
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except DataError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        code = 2
    except (OSError, UnicodeError) as exc:  # a file or model that cannot be read: the user's to fix
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"error: {where}{_one_line(exc.strerror if where and exc.strerror else exc)}", file=sys.stderr)
        code = 2
    except STOPS as exc:  # finished games, shards, checkpoints and tasks were kept on the way out
        line, code = stopped(exc)
        print(f"error: {line}", file=sys.stderr)
    finally:
        release_held()  # the outputs this command claimed: the next writer may have them
    sys.exit(code if isinstance(code, int) else 0)


def run() -> None:
    """The ``spag`` program: :func:`main`, then the process ends (:func:`spag.harness.process.end_process`)."""
    end_process(main)


if __name__ == "__main__":  # `torchrun -m spag.cli train ...` runs here: its processes close their group
    leave_process_group_at_exit()
    run()
