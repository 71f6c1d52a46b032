"""The import graph of the ``spag`` package, read from its source (nothing is imported).

:mod:`spag.pipeline.dvcyaml` follows it to find the code each stage runs; a test checks it has no cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spag"


@dataclass
class Module:
    path: Path
    top: set[str] = field(default_factory=set)  # imported at the module's top
    inside: dict[str, set[str]] = field(default_factory=dict)  # by each top-level function, inside it


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _targets(node: ast.Import | ast.ImportFrom, module: str, path: Path) -> Iterator[str]:
    """The spag modules an import statement imports (``from a import b``: ``a.b`` when it is a module)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "spag")
        return
    base = node.module or ""
    if node.level:  # relative: from the package the module is in
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    if base.split(".")[0] != "spag":
        return
    for alias in node.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def read_module(module: str) -> Module:
    """What ``module`` (a dotted name under spag) imports of spag, at its top and inside each of its top-level
    functions and classes."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parsed = Module(path)

    def imports(node: ast.AST) -> set[str]:
        return {
            target
            for child in ast.walk(node)
            if isinstance(child, (ast.Import, ast.ImportFrom))
            for target in _targets(child, module, path)
        }

    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # A class's methods are its functions: its imports count as the module's lazy ones.
            parsed.inside[statement.name] = imports(statement)
        else:
            parsed.top |= imports(statement)
    return parsed


def import_graph() -> dict[str, set[str]]:
    """Every spag module and the spag modules it imports, wherever the import stands (top, function, class)."""
    graph = {}
    for module in MODULES:
        parsed = read_module(module)
        graph[module] = (parsed.top | {m for ms in parsed.inside.values() for m in ms}) - {module}
    return graph
