"""spag.runtime.process: a stage or command collects garbage rarely while it imports torch and transformers,
and every stage script says so before its imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Counts the collections the imports of torch and transformers set off, oldest generation included.
IMPORT_COLLECTIONS = """
import gc, sys
if sys.argv[1] == "policy":
    from spag.runtime.process import short_lived_process
    short_lived_process()
runs = [0, 0, 0]
gc.callbacks.append(lambda phase, info: phase == "stop" and runs.__setitem__(info["generation"],
                                                                          runs[info["generation"]] + 1))
import torch, transformers.trainer
print(gc.get_threshold()[0], *runs)
"""


def _import_collections(mode: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", IMPORT_COLLECTIONS, mode], capture_output=True, text=True,
                          check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return [int(x) for x in done.stdout.split()[-4:]]


def test_the_imports_set_off_few_collections():
    threshold, young, _middle, oldest = _import_collections("policy")
    assert threshold == 50_000
    default = _import_collections("plain")
    assert default[0] == 700
    assert young * 20 < default[1] and oldest <= 1 < default[3]   # the full walks over everything imported


# The reason the exit is left alone: objects kept by a reference cycle are never finalised once frozen, and
# a module's globals are (its functions refer to them), so a file it never closed loses what it buffered.
FROZEN_AT_EXIT = """
import atexit, gc, sys
if sys.argv[1] == "frozen":
    atexit.register(gc.freeze)
class Cycle:
    def other_one(self):   # a function: it refers to this module's globals
        return self.other
a, b = Cycle(), Cycle()
a.other, b.other = b, a
unclosed = open(sys.argv[2], "w")
unclosed.write("kept")
"""


@pytest.mark.parametrize(("mode", "kept"), [("plain", "kept"), ("frozen", "")])
def test_freezing_at_exit_would_lose_buffered_writes(tmp_path, mode, kept):
    written = tmp_path / "written.txt"
    subprocess.run([sys.executable, "-c", FROZEN_AT_EXIT, mode, str(written)], check=True)
    assert written.read_text() == kept


# Records the youngest generation's threshold when transformers is first imported, then runs a stage
# script as a module (its `if __name__ == "__main__"` part, the stage itself, does not run).
IMPORTS_UNDER_POLICY = """
import gc, importlib.abc, runpy, sys
seen = {}
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ("transformers", "torch") and name not in seen:
            seen[name] = gc.get_threshold()[0]
sys.meta_path.insert(0, Watch())
runpy.run_path(sys.argv[1], run_name="stage_script")
print(seen)
"""


def test_a_stage_script_imports_torch_and_transformers_under_the_policy():
    done = subprocess.run([sys.executable, "-c", IMPORTS_UNDER_POLICY, "stages/train.py"], capture_output=True,
                          text=True, check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip().splitlines()[-1] == "{'torch': 50000, 'transformers': 50000}"


@pytest.mark.parametrize("script", sorted((ROOT / "stages").glob("*.py")), ids=lambda p: p.name)
def test_every_stage_script_applies_the_policy_before_its_other_imports(script):
    body = ast.parse(script.read_text()).body
    spag_imports = [i for i, node in enumerate(body) if isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("spag.") and node.module != "spag.runtime.process"]
    calls = [i for i, node in enumerate(body) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
             and getattr(node.value.func, "id", None) == "short_lived_process"]
    assert calls and spag_imports and calls[0] < min(spag_imports)
