"""The runtime: plumbing that every layer uses and that knows nothing of games, models or training.

- :mod:`spag.runtime.errors`      every error type a user sees as one line
- :mod:`spag.runtime.atomic`      the atomic-write helper every file and output folder goes through
- :mod:`spag.runtime.records`     reading JSON, JSON lines and Parquet records
- :mod:`spag.runtime.signals`     SIGTERM handled like Ctrl-C, so finished work is written
- :mod:`spag.runtime.console`     progress bars and summary lines
- :mod:`spag.runtime.fingerprint` content hashes of models and data, so that a resume cannot lie
- :mod:`spag.runtime.artifacts`   pinned registry files (sha256-checked, cached)
- :mod:`spag.runtime.statistics`  means and paired differences with bootstrap intervals clustered by target

The bottom layer: it imports no other part of spag (the layers are listed once, in pyproject.toml's
import-linter contract; ``tests/test_layers.py`` runs it).
"""
