"""A play run's episodes, claimed by the harness around the core's play (:mod:`spag.play.engine`): the
output (a folder of shards, or one Parquet file) passes the output rule before any model is loaded, and one
process writes it (or its rank's part of it) at a time."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from spag.game.episodes import holds_spag_episodes, what_is_in
from spag.harness.claims import claim_output_dir
from spag.harness.folders import PLAY_KIND
from spag.harness.locks import writing
from spag.harness.rule import check_output_file, claim_file
from spag.runtime.errors import OutputRefused


def claim_episode_file(path: str | os.PathLike, *, overwrite: bool, resume: bool) -> Path:
    """Check that episodes may be written to the single file ``path``: it is new, or spag's own episodes
    (a Parquet file with spag's episode schema) with ``overwrite`` (replaced) or ``resume`` (continued).
    OutputRefused otherwise (a folder, a device, a FIFO, a read-only file ...: the output rule of
    :func:`spag.harness.rule.check_output_file`). Returns the file to write (a symlink followed)."""
    target = check_output_file(path, "the episodes file", replace="any")
    if target.exists():
        if not holds_spag_episodes(target):
            raise OutputRefused(
                path,
                f"{what_is_in(target)} not episodes spag wrote: move it away or choose "
                "another path (--overwrite replaces only spag's own episodes)",
            )
        if not (overwrite or resume):
            raise OutputRefused(
                path,
                "already holds episodes: pass --resume to continue, --overwrite to "
                "replace them, or choose a new output",
            )
    return claim_file(target, "the episodes file", replace="any")


def claim_episodes(output, *, overwrite: bool, resume: bool, rank: int = 0, world: int = 1) -> Path:
    """Check that a play run may write its episodes to ``output`` (:class:`spag.game.episodes.EpisodeStore`'s
    layout: a ``.parquet`` file, else a folder of shards) and claim it; returns the path to write. Under
    several ranks the others' shards are expected in the folder: only a foreign folder is refused."""
    if Path(output).suffix == ".parquet":
        return claim_episode_file(output, overwrite=overwrite, resume=resume)
    return claim_output_dir(output, PLAY_KIND, overwrite=overwrite, resume=resume or world > 1)


@contextlib.contextmanager
def claimed_episodes(
    output, *, overwrite: bool, resume: bool, rank: int = 0, world: int = 1
) -> Iterator[Path]:
    """:func:`claim_episodes`, with the output (or this rank's part of it) locked for the block: a second
    writer, in another process, is refused at once."""
    with writing(output, f"r{rank}" if world > 1 else None):
        yield claim_episodes(output, overwrite=overwrite, resume=resume, rank=rank, world=world)
