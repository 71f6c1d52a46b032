"""The shape of the code: no function in spag/ runs over 80 lines, save the CLI declarations.

A long function usually mixes several concerns; split it into helpers that each do one thing. The only
exemption is the declarations of the command line under spag/commands/: each module's ``register`` and the
typer command functions it defines, whose length is their list of options.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import spag

MAX_LINES = 80
PACKAGE = Path(spag.__file__).parent


def _is_command(node: ast.AST) -> bool:
    """A function decorated ``@<app>.command(...)``: a typer command."""
    return any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "command"
        for d in getattr(node, "decorator_list", ())
    )


def _exempt(tree: ast.Module) -> set[ast.AST]:
    """The CLI declarations of a module under spag/commands/: ``register`` and the commands inside it."""
    exempt = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "register":
            exempt.add(node)
            exempt.update(
                inner for inner in node.body if isinstance(inner, ast.FunctionDef) and _is_command(inner)
            )
    return exempt


def long_functions(source: str, name: str, commands: bool, limit: int = MAX_LINES) -> list[str]:
    """``name:line function (N lines)`` for each function of ``source`` longer than ``limit`` lines
    (decorators not counted); with ``commands``, the CLI declarations are exempt."""
    tree = ast.parse(source, name)
    exempt = _exempt(tree) if commands else set()
    return [
        f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node not in exempt
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_in_spag_runs_over_80_lines():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20, f"found only {len(files)} modules under {PACKAGE}"
    found = []
    for path in files:
        relative = path.relative_to(PACKAGE.parent)
        found += long_functions(
            path.read_text(encoding="utf-8"), str(relative), relative.parts[1] == "commands"
        )
    assert not found, f"functions over {MAX_LINES} lines (split them into helpers):\n" + "\n".join(found)


def _function(name: str, lines: int, indent: str = "", decorator: str = "") -> str:
    body = "".join(f"{indent}    x = {i}\n" for i in range(lines - 1))
    return f"{indent}{decorator}def {name}():\n{body}"


@pytest.mark.parametrize("commands", [False, True])
def test_the_check_names_a_long_function_and_spares_only_cli_declarations(commands):
    source = (
        _function("short", 2)
        + _function("at_the_limit", 3)
        + _function("too_long", 4)  # lines 1-9
        + "def register(app):\n"  # line 10
        + _function("command", 4, "    ", "@app.command('x')\n    ")  # lines 11-15, decorator not counted
        + _function("helper", 4, "    ")  # lines 16-19: not a command, so never exempt
        + "    return command\n"
    )
    found = long_functions(source, "m.py", commands, limit=3)
    declarations = [] if commands else ["m.py:10 register (11 lines)", "m.py:12 command (4 lines)"]
    assert found == ["m.py:6 too_long (4 lines)", *declarations, "m.py:16 helper (4 lines)"]
