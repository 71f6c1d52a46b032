"""A bench script's JSON output: written where nothing is, or over an earlier JSON of the same script (a key
of its own says which), never over another file. Used by bench/gpu.py (``"check"``) and bench/epoch.py
(``"estimate"``), each with spag's output rule (:func:`spag.harness.rule.check_output_file`) after it.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT_LIMIT = 16 * 1024 * 1024  # these JSON files are a few KiB; a larger file there is someone else's


def owned_or_new(out: Path, key: str, value: str) -> bool:
    """Whether ``out`` may be written: a new file, or a JSON whose ``key`` is ``value`` (a regular file, read
    only if it is small: a FIFO would wait for a writer, a device never end)."""
    if not out.exists() and not out.is_symlink():
        return True
    if not out.is_file() or out.stat().st_size > OUT_LIMIT:
        return False
    try:
        return json.loads(out.read_text(encoding="utf-8")).get(key) == value
    except (OSError, ValueError, AttributeError):
        return False
