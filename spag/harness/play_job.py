"""Self-play under a launcher (``torchrun``): the play stage's settings travel as a file, each rank plays its
share of the words on its own GPU(s).

The stage writes the job (models, words, :class:`spag.play.engine.PlayConfig`, backend and player options, the
episode folder) to a JSON file and starts ``LAUNCHER -m spag.harness.play_job FILE``. Each launched process is one
rank: :func:`spag.play.engine.run_games` puts its engine on its GPU(s) (:func:`spag.play.engine.place_rank`), plays the
words whose index modulo the world size is its rank, writes its own shards (``shard-rN-*.parquet``) and its
counts (``.stats-rN.json`` beside the job file), which the stage adds up for its summary line.

Episodes kept from a run with other words, settings or models are dropped by the stage before it launches
(ranks never delete each other's shards); a rank killed part-way is resumed by the next run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from spag.harness.plays import claimed_episodes
from spag.harness.rule import enforce
from spag.models.devices import launcher_command, resolve_launcher
from spag.play.engine import PlayConfig, PlayStats, drop_stale_episodes, rank_and_world, run_games
from spag.runtime.atomic import write_json_atomic


def _stats_file(job_file: Path, rank: int) -> Path:
    return job_file.parent / f"{job_file.stem}.stats-r{rank}.json"


def play_under_launcher(
    launcher: str,
    model: str,
    words: list[str],
    config: PlayConfig,
    backend: str,
    player_options: dict,
    output: Path,
) -> PlayStats:
    """Play ``model`` against itself on ``words`` under ``launcher`` into the episode folder ``output``; the
    ranks' counts added up. Raises CalledProcessError when a rank fails."""
    output = Path(output)
    drop_stale_episodes(output, words, config, model, model)
    job_file = output.parent / f".{output.name}.play-job.json"
    write_json_atomic(
        job_file,
        {
            "model": model,
            "words": list(words),
            "config": config.to_json(),
            "backend": backend,
            "player_options": player_options,
            "output": str(output),
        },
    )
    for old in job_file.parent.glob(f"{job_file.stem}.stats-r*.json"):
        old.unlink()
    try:
        per_process = int(player_options.get("tensor_parallel_size") or 1) if backend == "vllm" else 1
        subprocess.run(
            [
                *launcher_command(resolve_launcher(launcher, per_process=per_process)),
                "-m",
                "spag.harness.play_job",
                str(job_file),
            ],
            check=True,
        )
        return _added_up(
            [
                json.loads(f.read_text(encoding="utf-8"))
                for f in sorted(job_file.parent.glob(f"{job_file.stem}.stats-r*.json"))
            ]
        )
    finally:
        job_file.unlink(missing_ok=True)
        for done in job_file.parent.glob(f"{job_file.stem}.stats-r*.json"):
            done.unlink()


def _added_up(ranks: list[dict]) -> PlayStats:
    """One PlayStats for the whole run: counts summed, the slowest rank's time, rank 0's provenance."""
    total = PlayStats()
    for i, rank in enumerate(ranks):
        for f in dataclasses.fields(PlayStats):
            value = rank.get(f.name)
            if f.name == "outcomes":
                total.outcomes += Counter(value or {})
            elif f.name == "seconds":
                total.seconds = max(total.seconds, float(value or 0.0))
            elif f.name == "provenance":
                total.provenance = value if i == 0 else total.provenance
            elif value is not None:
                setattr(total, f.name, getattr(total, f.name) + value)
    return total


def main(argv: list[str]) -> None:
    (job_file,) = argv
    job_file = Path(job_file)
    job = json.loads(job_file.read_text(encoding="utf-8"))
    enforce()  # the output rule watches every write (spag.harness.rule)
    stats = PlayStats()
    rank, world = rank_and_world()
    with claimed_episodes(job["output"], overwrite=False, resume=True, rank=rank, world=world):
        run_games(
            job["model"],
            job["model"],
            job["words"],
            PlayConfig.from_json(job["config"]),
            backend=job["backend"],
            output=job["output"],
            resume=True,
            stale="refuse",
            stats=stats,
            show_progress=os.environ.get("LOCAL_RANK", "0") == "0",
            **job["player_options"],
        )
    write_json_atomic(
        _stats_file(job_file, rank), {**dataclasses.asdict(stats), "outcomes": dict(stats.outcomes)}
    )


if __name__ == "__main__":  # vLLM's engine processes start by spawn, which imports this module again
    main(sys.argv[1:])
