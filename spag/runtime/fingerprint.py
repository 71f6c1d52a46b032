"""Content fingerprints: what a cached or partial result depends on, so that a resume cannot lie.

A model is identified by the bytes of its files, not by its path: after a retrain to the same directory
(``dvc exp run -S spag.kl_coeff=0.1``) every cache keyed by the fingerprint misses and is recomputed.
Hashing reads a file's bytes (about a second per GB). The digest of a file is remembered for as long as
its device, inode, size and modification and change times stay the same (what DVC trusts too): within a
process, and for files of :data:`KEPT_FROM` bytes or more (a model's weights) across processes, in
``digests/`` of spag's cache ($SPAG_CACHE, else ~/.cache/spag), so each pipeline stage does not read again
the models the stages before it hashed. A cache that cannot be read or written is passed over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from spag.runtime.artifacts import cache_dir
from spag.runtime.atomic import write_text_atomic
from spag.runtime.errors import DataError

# Files that describe a run rather than the model: they change with every run of identical weights.
_NOT_THE_MODEL = {
    ".spag-output.json",
    "training_summary.json",
    "README.md",
    "trainer_state.json",
    "training_args.bin",
}
_FILE_DIGESTS: dict[tuple, str] = {}
KEPT_FROM = 1 << 20  # bytes: smaller files are hashed again, faster than their digest is looked up
_DIGEST = re.compile(r"[0-9a-f]{128}")


def file_digest(path: str | os.PathLike) -> str:
    """BLAKE2b of a file's bytes, remembered while the file's device, inode, size, mtime and ctime stay the
    same (see the module docstring)."""
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _FILE_DIGESTS:
        kept = _kept_digest_path(key) if stat.st_size >= KEPT_FROM else None
        digest = _read_kept(kept) if kept is not None else None
        if digest is None:
            with open(path, "rb") as f:
                digest = hashlib.file_digest(f, "blake2b").hexdigest()
            if kept is not None:
                _keep(kept, digest)
        _FILE_DIGESTS[key] = digest
    return _FILE_DIGESTS[key]


def _kept_digest_path(key: tuple) -> Path:
    name = hashlib.blake2b(json.dumps(key).encode(), digest_size=16).hexdigest()
    return cache_dir() / "digests" / name[:2] / name


def _read_kept(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return None
    return text if _DIGEST.fullmatch(text) else None


def _keep(path: Path, digest: str) -> None:
    """Write ``digest`` to ``path`` atomically (a reader sees the whole digest or none); an unwritable cache
    is passed over."""
    try:
        write_text_atomic(path, digest + "\n")  # spag's own cache
    except (OSError, DataError):
        pass


def model_fingerprint(name_or_path: str | os.PathLike) -> str:
    """The identity of a model: a hash of every file in its directory (weights, config, tokenizer).

    Anything that is not a local directory (a hub id, an endpoint's model name) is identified by its
    name, the best that can be known without downloading it.
    """
    path = Path(name_or_path)
    digest = hashlib.blake2b(digest_size=16)
    if not path.is_dir():
        digest.update(f"name:{name_or_path}".encode())
        return digest.hexdigest()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        relative = file.relative_to(path)
        if relative.name in _NOT_THE_MODEL or relative.parts[0].startswith(("checkpoint", ".")):
            continue
        digest.update(f"{relative.as_posix()}:{file_digest(file)}\n".encode())
    return digest.hexdigest()


def settings_fingerprint(settings: dict) -> str:
    """A short hash of JSON-able settings (sorted keys)."""
    return hashlib.blake2b(
        json.dumps(settings, sort_keys=True, default=str).encode(), digest_size=16
    ).hexdigest()


def differences(saved: dict, wanted: dict) -> str:
    """``key: saved -> wanted`` for every key that differs, for a "recomputing because" message."""
    keys = sorted(set(saved) | set(wanted))
    return ", ".join(
        f"{k}: {saved.get(k)!r} -> {wanted.get(k)!r}" for k in keys if saved.get(k) != wanted.get(k)
    )
