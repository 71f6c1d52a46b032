"""The layers of the package: written down once (pyproject.toml's import-linter contract), no import up a
layer and no cycle, lazy imports inside functions included; imports inside functions only for the heavy or
optional libraries of :data:`HEAVY`.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import networkx as nx

from spag.pipeline.imports import MODULES, PACKAGE, ROOT, import_graph

# The libraries a module may import inside a function, and why: each is slow to import or optional, and
# the modules that use them are imported by the command line (`spag --help`), the settings checks and the
# core that travels to a GPU node, which need none of them.
HEAVY = {
    "torch": "seconds to import: `spag --help`, `spag config check` and the stages' checks stay fast",
    "transformers": "seconds to import, with torch",
    "accelerate": "imported with torch",
    "peft": "imported with torch (LoRA only)",
    "tokenizers": "with torch",
    "huggingface_hub": "only where a model is fetched or loaded",
    "datasets": "only the benchmark (with lm-eval)",
    "lm_eval": "only the benchmark commands and stages",
    "vllm": "an optional backend (vLLM, GPU or CPU build)",
    "deepspeed": "optional: ZeRO-3 training only",
    "cpuinfo": "optional: py-cpuinfo comes with DeepSpeed",
    "trl": "optional: online self-play only",
    "openai": "optional: the openai backend only",
    "pynvml": "optional: GPUs without nvidia-smi",
    "dvclive": "only a training run that logs",
    "scipy": "half a second (scipy.stats): statistics only",
    "matplotlib": "only the plots",
    "textblob": "a second to import: game.rules original only",
    "nltk": "with textblob",
    "lemminflect": "only the whole-word judge's inflections, built once",
    "wordfreq": "only word lists: not needed to play, judge or train on a GPU node",
    "polars": "the data-frame layer: not needed to play or train on a GPU node",
    "duckdb": "only `spag analyze` and the stages that query episodes",
    "pyarrow": "only where Parquet is read or written",
}


def layers() -> list[list[str]]:
    """The layers of the import-linter contract, top to bottom, each a list of its sibling modules."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's verdict on the package under ``root``, by the contracts of ``root/pyproject.toml``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [
        str(Path(sys.executable).with_name("lint-imports")),
        "--no-cache",
        "--config",
        "pyproject.toml",
    ]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)


def test_no_import_runs_up_a_layer():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_a_planted_upward_import_breaks_the_layers(tmp_path):
    """A lazy import of the training code from the game's word lists, the kind an import graph read from
    the tops of modules misses, fails the check, and the check names it."""
    shutil.copytree(PACKAGE, tmp_path / "spag", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "spag" / "game" / "words.py", "a", encoding="utf-8") as module:
        module.write("\n\ndef planted():\n    from spag.train import losses\n\n    return losses\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "spag.game is not allowed to import spag.train" in result.stdout
    assert "spag.game.words -> spag.train.losses" in result.stdout


def test_every_part_of_the_package_is_in_one_layer():
    named = [name for layer in layers() for name in layer]
    assert len(named) == len(set(named))
    parts = {f"spag.{path.stem}" for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    parts |= {f"spag.{path.parent.name}" for path in PACKAGE.glob("*/__init__.py")}
    assert set(named) == parts


def test_at_most_eight_modules_stand_at_the_root_and_each_layer_says_what_it_holds():
    assert len(list(PACKAGE.glob("*.py"))) <= 8
    for name in [name for layer in layers() for name in layer]:
        path = MODULES[name]
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc and len(doc.split()) >= 12, f"{path} needs a docstring saying what it holds"


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
    assert "spag.game.base" in graph["spag.play.engine"]  # imported at the top
    assert "spag.train.job" in graph["spag.harness.training"]  # what the training stages run, at its top
    assert len(graph) == len(MODULES) > 60
    assert import_cycles(graph) == []


def test_a_cycle_is_found_through_a_lazy_import_or_a_package():
    assert import_cycles({"spag.a": {"spag.b"}, "spag.b": {"spag.a"}, "spag.c": set()}) == [
        ["spag.a", "spag.b"]
    ]
    # spag.x.y imports spag.z, which imports spag.x.w: importing spag.x.w runs spag/x/__init__.py first
    graph = {"spag.x": {"spag.x.y"}, "spag.x.y": {"spag.z"}, "spag.z": {"spag.x.w"}, "spag.x.w": set()}
    assert import_cycles(graph) == [["spag.x", "spag.x.y", "spag.z"]]
    assert import_cycles({"spag.x": {"spag.x.y"}, "spag.x.y": {"spag.x.w"}, "spag.x.w": set()}) == []


# --------------------------------------------------------------------------- imports inside functions


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement names (``from a import b``: ``a.b`` where that is a spag module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        return ["spag"]  # a relative import: spag's own
    return [
        f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names
    ]


def _split(tree: ast.Module) -> tuple[list[ast.AST], list[ast.AST]]:
    """(imports at the module's top, imports inside its functions and classes)."""
    top, inside = [], []
    for statement in tree.body:
        within = isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        for node in ast.walk(statement):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                (inside if within else top).append(node)
    return top, inside


_HEAVY_AT_IMPORT: dict[str, str | None] = {}


def heavy_at_import(module: str) -> str | None:
    """The :data:`HEAVY` library that importing the spag ``module`` loads (its top, the spag modules it
    imports there and the packages above them), or None."""
    if module not in MODULES:
        return None
    if module not in _HEAVY_AT_IMPORT:
        _HEAVY_AT_IMPORT[module] = None  # while it is being read: an import cycle adds nothing
        top, _ = _split(ast.parse(MODULES[module].read_text(encoding="utf-8")))
        parts = module.split(".")
        named = [target for node in top for target in _imported(node)]
        named += [".".join(parts[:i]) for i in range(2, len(parts))]
        _HEAVY_AT_IMPORT[module] = next(
            (
                found
                for target in named
                if (
                    found := (
                        target.split(".")[0]
                        if target.split(".")[0] in HEAVY
                        else heavy_at_import(target)
                        if target.startswith("spag")
                        else None
                    )
                )
            ),
            None,
        )
    return _HEAVY_AT_IMPORT[module]


# The player backends, each imported where load_player chooses it: a stage depends on the backends its params
# choose and on no other (spag.pipeline.dvcyaml), so they are not imported at spag.players' top.
CHOSEN_AT_RUN_TIME = {"spag.players.hf", "spag.players.vllm", "spag.players.openai", "spag.players.human"}


def lazy_imports(source: str, name: str) -> list[str]:
    """``name:line statement`` for each import inside a function or class of ``source`` that loads nothing
    of :data:`HEAVY` (and is not a backend :data:`CHOSEN_AT_RUN_TIME`): it belongs at the module's top."""
    _, inside = _split(ast.parse(source, name))
    found = []
    for node in inside:
        targets = _imported(node)
        if set(targets) <= CHOSEN_AT_RUN_TIME:
            continue
        if not any(
            t.split(".")[0] in HEAVY or (t.startswith("spag") and heavy_at_import(t)) for t in targets
        ):
            found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_imports_inside_functions_load_only_heavy_or_optional_libraries():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += lazy_imports(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    assert not found, (
        "imports inside functions of light modules (move them to the module's top):\n" + "\n".join(found)
    )


def test_the_lazy_import_check_names_what_it_finds():
    source = (
        "import json\n"
        "def f():\n    from spag.runtime.errors import DataError\n    import os\n    import torch\n"
        "    from spag.evaluate.shared_prefix import SharedPrefixLM\n"
        "class C:\n    def g(self):\n        from spag.config import Game\n"
    )
    assert lazy_imports(source, "m.py") == [
        "m.py:3 from spag.runtime.errors import DataError",
        "m.py:4 import os",
        "m.py:9 from spag.config import Game",
    ]
    assert heavy_at_import("spag.evaluate.shared_prefix") == "lm_eval"  # lm-eval's HF model at its top
    assert heavy_at_import("spag.config") is None
