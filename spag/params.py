"""Checks of a params file (params.yaml, configs/paper.yaml) for the switches that choose between this
project's behaviour and the original code's, so that a misspelt value stops a stage with one line naming
the key instead of failing deep inside it."""

from __future__ import annotations

import os
from typing import Any, Mapping

from spag.game.rules import RULE_SETS
from spag.train.schedules import LR_SCHEDULERS

REDUCTIONS = ("rows", "weights")  # spag.train.losses.REDUCTIONS, without importing torch (a test checks)

# (section, key): the allowed values.
CHOICES = {
    ("game", "rules"): RULE_SETS,
    ("imitate", "lr_scheduler"): LR_SCHEDULERS,
    ("spag", "lr_scheduler"): LR_SCHEDULERS,
    ("spag", "reduction"): REDUCTIONS,
}
FLAGS = (("words", "skip_stop_words"), ("spag", "detach_advantage"), ("reward", "keep_truncated"))
FILES = (("words", "source"), ("game", "templates"), ("teacher", "episodes"), ("teacher", "rows"))
REQUIRED = (*CHOICES, *FLAGS, *FILES, ("imitate", "sft"), ("imitate", "sft_limit"))


class ParamsError(ValueError):
    """A one-line message naming the params file and the key."""

    def __init__(self, source: str | os.PathLike, key: str, message: str):
        super().__init__(f"{source}: {key}: {message}")


def check_params(p: Mapping[str, Any], source: str | os.PathLike = "params.yaml") -> Mapping[str, Any]:
    """Raise ParamsError for a missing or bad value of a switch; return ``p`` unchanged."""
    for section, key in REQUIRED:
        if not isinstance(p.get(section), Mapping) or key not in p[section]:
            raise ParamsError(source, f"{section}.{key}", "missing")
    for (section, key), allowed in CHOICES.items():
        if p[section][key] not in allowed:
            raise ParamsError(source, f"{section}.{key}",
                              f"{p[section][key]!r} is not one of {', '.join(allowed)}")
    for section, key in FLAGS:
        if not isinstance(p[section][key], bool):
            raise ParamsError(source, f"{section}.{key}", f"expected true or false, got {p[section][key]!r}")
    for section, key in FILES:
        value = p[section][key]
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ParamsError(source, f"{section}.{key}", f"expected a file path or null, got {value!r}")
    if p["teacher"]["episodes"] is not None and p["teacher"]["rows"] is not None:
        raise ParamsError(source, "teacher.episodes", "give teacher.episodes or teacher.rows, not both")
    sft, limit = p["imitate"]["sft"], p["imitate"]["sft_limit"]
    if sft is not None and (not isinstance(sft, str) or not sft.strip()):
        raise ParamsError(source, "imitate.sft", f"expected builtin, a file path or null, got {sft!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ParamsError(source, "imitate.sft_limit", f"expected a count or null, got {limit!r}")
    return p


def existing_file(p: Mapping[str, Any], section: str, key: str, source: str | os.PathLike = "params.yaml") -> str:
    """The file a params key names, or ParamsError when it does not exist."""
    value = p[section][key]
    if not os.path.isfile(value):
        raise ParamsError(source, f"{section}.{key}", f"no such file: {value}")
    return value
