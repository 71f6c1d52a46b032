"""What settings are made of: sections of knobs, the value types they share, and the safe YAML reader.

:mod:`spag.config` assembles the sections of a params file from these; a game package
(:mod:`spag.game`) declares its own settings with them, so a game's knobs are checked, documented and
turned into command-line options like every other.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from spag.runtime.errors import ParamsError


def _fspath(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


# A file or directory path: a string (a pathlib.Path from Python code is accepted), never empty.
PathStr = Annotated[str, BeforeValidator(_fspath), Field(min_length=1)]


def shown_url(url: str) -> str:
    """``url`` as messages show it: a password in it (``https://user:secret@host``) is masked, also in a
    URL too broken to parse (everything between the user name and the last ``@`` is taken as the password)."""
    head, sep, rest = url.partition("//")
    head, rest = (head + sep, rest) if sep else ("", url)
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{head}{userinfo.split(':', 1)[0]}:***@{host}"


def _http_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host (and a numeric port, if any)")
    return url


# An endpoint URL: http or https, with a host; messages show it with any password masked.
HttpUrl = Annotated[str, AfterValidator(_http_url)]


def _command_line(text: str) -> str:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"not a command line ({exc})") from None
    if not words:
        raise ValueError("an empty command line (null runs it in this process)")
    return text


# A command line (a launcher): words as a shell splits them, at least one.
CommandLine = Annotated[str, AfterValidator(_command_line)]


DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]+)?)$"  # a torch device a setting may name


# The largest seed: every seed is written to Parquet as a 64-bit integer, after offsets for epochs and games.
SEED_MAX = 2**62


def knob(default: Any, help: str, **constraints) -> Any:
    """A field with its default, its one line of help and its range (ge, gt, le, lt)."""
    return Field(default, description=help, **constraints)


class Section(BaseModel):
    """A group of settings. Strict: YAML's true/false, numbers and strings are taken as they are; no
    number is infinite or NaN (``.inf`` in YAML, ``inf`` on the command line)."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, allow_inf_nan=False)


# ------------------------------------------------------------------------------------------ params files


# A params file is a few hundred lines; these bounds stop a hostile or broken one early, in one line.
MAX_PARAMS_BYTES = 1 << 20  # 1 MiB
MAX_PARAMS_DEPTH = 32  # sections, keys, lists: a real file nests 4 levels


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last silently,
    so a second ``play:`` section would drop the first without a word) and a key that is a list or a
    mapping (``? [a, b]``). Merge keys (``<<: *anchor``) work as YAML defines them: the mapping's own keys
    win over merged ones."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be a plain name, not a {key_node.id}", key_node.start_mark
                )
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's content, or ParamsError (one line) naming the file: no such file, not a regular file
    (a FIFO would block, /dev/zero never end), larger than :data:`MAX_PARAMS_BYTES`, nested deeper than
    :data:`MAX_PARAMS_DEPTH`, not UTF-8 or not valid YAML."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO, device or socket"
            raise ParamsError(path, "", f"is {kind}, not a params file")
        with path.open("rb") as f:
            data = f.read(MAX_PARAMS_BYTES + 1)
    except FileNotFoundError:
        raise ParamsError(path, "", "no such file") from None
    except OSError as exc:
        raise ParamsError(path, "", f"cannot be read ({exc.strerror or exc.__class__.__name__})") from None
    if len(data) > MAX_PARAMS_BYTES:
        raise ParamsError(path, "", f"is larger than {MAX_PARAMS_BYTES >> 20} MiB: not a params file")
    try:
        text = data.decode("utf-8")
    except UnicodeError as exc:
        raise ParamsError(path, "", f"is not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        _check_depth(text)
        return yaml.load(text, Loader=_UniqueKeys)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ParamsError(
            path, "", f"{where}not valid YAML ({getattr(exc, 'problem', None) or exc})"
        ) from None


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than :data:`MAX_PARAMS_DEPTH`, read from YAML's event stream (the parser holds
    no recursion; building the objects would, and overflows on a file of a few kilobytes)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_PARAMS_DEPTH:
                raise yaml.MarkedYAMLError(
                    problem=f"nested deeper than {MAX_PARAMS_DEPTH} levels", problem_mark=event.start_mark
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
