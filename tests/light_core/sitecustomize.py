"""Loaded by every Python process started with this folder on PYTHONPATH (tests/test_light_core.py).

``SPAG_LIGHT_REPORT=DIR``: at exit, the process writes the top-level names of the modules it loaded to
``DIR/<pid>.json``, with its command line.
``SPAG_LIGHT_ABSENT=a,b``: those packages cannot be imported, as on a machine without them (the GPU image).
``SPAG_LIGHT_PLANT=MODULE:PACKAGE``: once MODULE is imported, PACKAGE is imported too: a planted import on
the path, to show that the test sees one.
``SPAG_LIGHT_UNINSTALLED=a,b``: those distributions look uninstalled: their metadata is not found, and an
editable install's finder is dropped (the source tree on PYTHONPATH is what runs).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

_REPORT = os.environ.get("SPAG_LIGHT_REPORT")
_ABSENT = {name for name in os.environ.get("SPAG_LIGHT_ABSENT", "").split(",") if name}
_PLANT = os.environ.get("SPAG_LIGHT_PLANT", "")
_UNINSTALLED = {name for name in os.environ.get("SPAG_LIGHT_UNINSTALLED", "").split(",") if name}


class _Absent(importlib.abc.MetaPathFinder):
    """Python's path finder, blind to the absent packages: importing one fails and ``find_spec`` says
    None, as in an environment without them."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _ABSENT:
            return None
        return self.finder.find_spec(name, path, target)

    def find_distributions(self, *args, **kwargs):
        return self.finder.find_distributions(*args, **kwargs)

    def invalidate_caches(self):
        self.finder.invalidate_caches()


class _Plant(importlib.abc.MetaPathFinder):
    """Imports ``package`` right after ``module`` has run."""

    def __init__(self, module: str, package: str):
        self.module, self.package = module, package

    def find_spec(self, name, path=None, target=None):
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module
        package = self.package

        def exec_module(module):
            run(module)
            importlib.import_module(package)

        spec.loader.exec_module = exec_module
        return spec


def _uninstall() -> None:
    import importlib.metadata

    sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
    from_name = importlib.metadata.Distribution.from_name.__func__

    def hidden(cls, name):
        if name.lower() in _UNINSTALLED:
            raise importlib.metadata.PackageNotFoundError(name)
        return from_name(cls, name)

    importlib.metadata.Distribution.from_name = classmethod(hidden)


def _report() -> None:
    loaded = sorted(
        {name.partition(".")[0] for name, module in list(sys.modules.items()) if module is not None}
    )
    path = Path(_REPORT, f"{os.getpid()}.json")
    path.write_text(json.dumps({"argv": sys.argv, "modules": loaded}), encoding="utf-8")


if _UNINSTALLED:
    _uninstall()
if _ABSENT:
    sys.meta_path[:] = [_Absent(f) if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
if _PLANT:
    sys.meta_path.insert(0, _Plant(*_PLANT.split(":")))
if _REPORT:
    atexit.register(_report)
