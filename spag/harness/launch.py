"""A training run under a launcher (``torchrun``, ``accelerate launch``): its settings travel as a file.

The pipeline writes the run (method, paths and every :class:`spag.config.TrainConfig` knob) to a JSON
file and starts ``LAUNCHER -m spag.harness.launch FILE``; each launched process reads the file back,
validated by the same schema, and calls :func:`spag.train.job.run_training`, or, for online self-play
(:func:`launch_online`: the words and the games' settings travel too), :func:`spag.train.online.run_online`.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from spag.config import ONLINE, TrainConfig
from spag.harness.process import end_process, leave_process_group_at_exit
from spag.harness.rule import enforce
from spag.models.devices import check_launch, launcher_command, resolve_launcher
from spag.runtime.errors import DataError
from spag.train.bookkeeping import SUMMARY_FILE


def launch(
    launcher: str,
    method: str,
    model,
    data,
    output,
    config: TrainConfig,
    *,
    ref=None,
    other_checkpoints: str = "refuse",
) -> None:
    """Run one training job under ``launcher`` (the arguments of
    :func:`spag.train.job.run_training`); raise CalledProcessError when it fails, DataError when it
    ends without writing a model (a launcher that is no Python launcher: ``echo``, ``true``)."""
    _run_job(
        launcher,
        config,
        output,
        {
            "method": method,
            "model": os.fspath(model),
            "data": os.fspath(data),
            "output": os.fspath(output),
            "ref": None if ref is None else os.fspath(ref),
            "other_checkpoints": other_checkpoints,
            "config": config.model_dump(),
        },
    )


def launch_online(
    launcher: str,
    model,
    words,
    output,
    *,
    games,
    config: TrainConfig,
    episodes_dir,
    data=None,
    other_checkpoints: str = "refuse",
    published=None,
) -> None:
    """One online self-play run (the arguments of :func:`spag.train.online.run_online`) under ``launcher``."""
    _run_job(
        launcher,
        config,
        output,
        {
            "method": ONLINE,
            "model": os.fspath(model),
            "words": list(words),
            "output": os.fspath(output),
            "games": games.as_json(),
            "config": config.model_dump(),
            "episodes": os.fspath(episodes_dir),
            "data": None if data is None else os.fspath(data),
            "other_checkpoints": other_checkpoints,
            "published": None if published is None else os.fspath(published),
        },
    )


def _run_job(launcher: str, config: TrainConfig, output, job: dict) -> None:
    """Check the launcher and the DeepSpeed file, write ``job`` beside ``output`` and run it under the
    launcher; a run that ends without error must have written a model."""
    check_launch(launcher, config.deepspeed)
    output = Path(output)
    summary = output / SUMMARY_FILE
    before = _stamp(summary)
    path = output.parent / f".{output.name}.train-job.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job, indent=1), encoding="utf-8")
    try:
        subprocess.run(
            [*launcher_command(resolve_launcher(launcher)), "-m", "spag.harness.launch", str(path)],
            check=True,
        )
    finally:
        path.unlink(missing_ok=True)
    if _stamp(summary) in (None, before):
        raise DataError(
            output,
            None,
            f"the launcher {launcher!r} exited without error but wrote no model here "
            "(it must run Python: torchrun, accelerate launch, deepspeed ...)",
        )


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def main(argv: list[str]) -> None:
    leave_process_group_at_exit()  # the group the Trainer (or DeepSpeed) joins, closed before the process ends
    enforce()  # the output rule watches every write (spag.harness.rule)
    (job_file,) = argv
    job = json.loads(Path(job_file).read_text(encoding="utf-8"))
    config = TrainConfig.model_validate(job["config"])
    if job["method"] == ONLINE:
        from spag.harness.training import train_online
        from spag.train.online import OnlineGames

        train_online(
            job["model"],
            job["words"],
            job["output"],
            games=OnlineGames.from_json(job["games"]),
            config=config,
            episodes_dir=job["episodes"],
            data=job["data"],
            other_checkpoints=job["other_checkpoints"],
            published=job["published"],
        )
        return
    from spag.harness.training import train

    train(
        job["method"],
        job["model"],
        job["data"],
        job["output"],
        ref=job["ref"],
        config=config,
        other_checkpoints=job["other_checkpoints"],
    )


if __name__ == "__main__":
    # Ended without the interpreter's teardown: the C++ objects of gloo and DeepSpeed that a finished
    # process still holds are never destroyed, where their destructors abort now and then at exit.
    end_process(functools.partial(main, sys.argv[1:]))
