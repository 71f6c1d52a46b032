"""Content fingerprints: what a cached or partial result depends on, so that a resume cannot lie.

A model is identified by the bytes of its files, not by its path: after a retrain to the same directory
(``dvc exp run -S spag.kl_coeff=0.1``) every cache keyed by the fingerprint misses and is recomputed.
Hashing reads every weight file once per process (about a second per GB); the digest of a file is
remembered for as long as its size, modification time and inode stay the same.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

# Files that describe a run rather than the model: they change with every run of identical weights.
_NOT_THE_MODEL = {".spag-output.json", "training_summary.json", "README.md", "trainer_state.json",
                  "training_args.bin"}
_FILE_DIGESTS: dict[tuple, str] = {}


def file_digest(path: str | os.PathLike) -> str:
    """BLAKE2b of a file's bytes (memoised on path, size, mtime and inode)."""
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _FILE_DIGESTS:
        with open(path, "rb") as f:
            _FILE_DIGESTS[key] = hashlib.file_digest(f, "blake2b").hexdigest()
    return _FILE_DIGESTS[key]


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
    return hashlib.blake2b(json.dumps(settings, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()


def differences(saved: dict, wanted: dict) -> str:
    """``key: saved -> wanted`` for every key that differs, for a "recomputing because" message."""
    keys = sorted(set(saved) | set(wanted))
    return ", ".join(f"{k}: {saved.get(k)!r} -> {wanted.get(k)!r}" for k in keys if saved.get(k) != wanted.get(k))
