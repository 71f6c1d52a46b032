"""The layers of the package: no import cycle, and lazy imports only where the code meets its edges.

The import graph is read from the source (:func:`spag.imports.import_graph`), imports inside functions
included, so a cycle that lazy imports hide is still one. A lazy import of a spag module, or of the
standard library, stands only at an edge: the command line, the DVC stage functions (each stage's lazy
imports are the code it runs, :mod:`spag.dvcyaml`), the launched-process entry point and the player
backends' registry, or where an optional backend (vLLM, the OpenAI SDK) is reached.
"""

from __future__ import annotations

import ast
import sys

import networkx as nx

from spag.imports import MODULES, PACKAGE, import_graph

EDGES = ("spag/cli.py", "spag/commands/", "spag/pipeline.py", "spag/train/launch.py", "spag/players/__init__.py")
# Modules that load a heavy or optional library when imported: vLLM, the OpenAI SDK, lm-eval's HF model
# (torch and transformers, seconds), reached only by the code that runs them.
OPTIONAL_BACKENDS = ("spag.players.vllm", "spag.players.openai", "spag.evaluate.shared_prefix")


def _with_packages(graph: dict[str, set[str]]) -> nx.DiGraph:
    """The graph as Python runs it: importing ``a.b.c`` first runs the packages ``a.b`` above it."""
    edges = nx.DiGraph()
    for module, targets in graph.items():
        edges.add_node(module)
        for target in targets:
            edges.add_edge(module, target)
            parts = target.split(".")
            for i in range(2, len(parts)):
                package = ".".join(parts[:i])
                if package in graph and not module.startswith(package + "."):
                    edges.add_edge(module, package)
    return edges


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle once, as a list of modules (sorted, shortest first)."""
    found = [sorted(c) for c in nx.strongly_connected_components(_with_packages(graph)) if len(c) > 1]
    return sorted(found, key=len)


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "spag.game.base" in graph["spag.play"]  # imported at the top
    assert "spag.train.trainer" in graph["spag.pipeline"]  # imported inside a stage function
    assert len(graph) == len(MODULES) > 60
    assert import_cycles(graph) == []


def test_a_cycle_is_found_through_a_lazy_import_or_a_package():
    assert import_cycles({"spag.a": {"spag.b"}, "spag.b": {"spag.a"}, "spag.c": set()}) == [["spag.a", "spag.b"]]
    # spag.x.y imports spag.z, which imports spag.x.w: importing spag.x.w runs spag/x/__init__.py first
    graph = {"spag.x": {"spag.x.y"}, "spag.x.y": {"spag.z"}, "spag.z": {"spag.x.w"}, "spag.x.w": set()}
    assert import_cycles(graph) == [["spag.x", "spag.x.y", "spag.z"]]
    assert import_cycles({"spag.x": {"spag.x.y"}, "spag.x.y": {"spag.x.w"}, "spag.x.w": set()}) == []


def lazy_imports(source: str, name: str) -> list[str]:
    """``name:line statement`` for each import of a spag module or of the standard library made inside a
    function or class of ``source``, save those that reach an optional backend."""
    tree = ast.parse(source, name)
    found = []
    for top in tree.body:
        if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(top):
            if isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            inner = [m for m in modules if m.split(".")[0] == "spag" or m.split(".")[0] in sys.stdlib_module_names]
            if inner and not all(m in OPTIONAL_BACKENDS for m in inner):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_spag_and_the_standard_library_are_imported_lazily_only_at_the_edges():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if not relative.startswith(EDGES):
            found += lazy_imports(path.read_text(encoding="utf-8"), relative)
    assert not found, "imports inside functions away from the edges (move them to the module's top):\n" + \
        "\n".join(found)


def test_the_lazy_import_check_names_what_it_finds():
    source = ("import json\n"
              "def f():\n    from spag.io import DataError\n    import os\n    import torch\n"
              "    from spag.players.vllm import VLLMPlayer\n"
              "class C:\n    def g(self):\n        from spag.config import Game\n")
    assert lazy_imports(source, "m.py") == ["m.py:3 from spag.io import DataError", "m.py:4 import os",
                                            "m.py:9 from spag.config import Game"]
