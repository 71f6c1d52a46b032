"""A training run under a launcher (``torchrun``, ``accelerate launch``): its settings travel as a file.

The pipeline writes the run (method, paths and every :class:`spag.config.TrainConfig` knob) to a JSON
file and starts ``LAUNCHER -m spag.train.launch FILE``; each launched process reads the file back,
validated by the same schema, and calls :func:`spag.train.trainer.run_training`, or, for online self-play
(:func:`launch_online`: the words and the games' settings travel too), :func:`spag.train.online.run_online`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from spag.config import TrainConfig


def launch(launcher: str, method: str, model, data, output, config: TrainConfig, *, ref=None,
           other_checkpoints: str = "refuse") -> None:
    """Run one training job under ``launcher`` (the arguments of
    :func:`spag.train.trainer.run_training`); raise CalledProcessError when it fails."""
    _run_job(launcher, output, {"method": method, "model": os.fspath(model), "data": os.fspath(data),
                                "output": os.fspath(output), "ref": None if ref is None else os.fspath(ref),
                                "other_checkpoints": other_checkpoints, "config": config.model_dump()})


def launch_online(launcher: str, model, words, output, *, games, config: TrainConfig, episodes_dir, data=None,
                  other_checkpoints: str = "refuse") -> None:
    """One online self-play run (the arguments of :func:`spag.train.online.run_online`) under ``launcher``."""
    from spag.config import ONLINE

    _run_job(launcher, output, {"method": ONLINE, "model": os.fspath(model), "words": list(words),
                                "output": os.fspath(output), "games": games.as_json(), "config": config.model_dump(),
                                "episodes": os.fspath(episodes_dir), "data": None if data is None else os.fspath(data),
                                "other_checkpoints": other_checkpoints})


def _run_job(launcher: str, output, job: dict) -> None:
    output = Path(output)
    path = output.parent / f".{output.name}.train-job.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job, indent=1), encoding="utf-8")
    try:
        subprocess.run([*launcher_command(launcher), "-m", "spag.train.launch", str(path)], check=True)
    finally:
        path.unlink(missing_ok=True)


def launcher_command(launcher: str) -> list[str]:
    """``launcher`` as arguments; a launcher not on PATH is looked for beside this Python (a virtual
    environment's ``torchrun`` or ``accelerate`` when spag runs without the environment activated)."""
    argv = shlex.split(launcher)
    if argv and shutil.which(argv[0]) is None:
        beside = Path(sys.executable).parent / argv[0]
        if beside.is_file():
            argv[0] = str(beside)
    return argv


def free_port() -> int:
    """A TCP port on this host that nothing listens on now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(argv: list[str]) -> None:
    from spag.config import ONLINE

    (job_file,) = argv
    job = json.loads(Path(job_file).read_text(encoding="utf-8"))
    config = TrainConfig.model_validate(job["config"])
    if job["method"] == ONLINE:
        from spag.train.online import OnlineGames, run_online

        run_online(job["model"], job["words"], job["output"], games=OnlineGames.from_json(job["games"]),
                   config=config, episodes_dir=job["episodes"], data=job["data"],
                   other_checkpoints=job["other_checkpoints"])
        return
    from spag.train.trainer import run_training

    run_training(job["method"], job["model"], job["data"], job["output"], ref=job["ref"], config=config,
                 other_checkpoints=job["other_checkpoints"])


if __name__ == "__main__":
    main(sys.argv[1:])
