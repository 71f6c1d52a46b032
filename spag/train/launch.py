"""A training run under a launcher (``torchrun``, ``accelerate launch``): its settings travel as a file.

The pipeline writes the run (method, paths and every :class:`spag.config.TrainConfig` knob) to a JSON
file and starts ``LAUNCHER -m spag.train.launch FILE``; each launched process reads the file back,
validated by the same schema, and calls :func:`spag.train.trainer.run_training`.
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
    output = Path(output)
    job = output.parent / f".{output.name}.train-job.json"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(json.dumps({"method": method, "model": os.fspath(model), "data": os.fspath(data),
                               "output": os.fspath(output), "ref": None if ref is None else os.fspath(ref),
                               "other_checkpoints": other_checkpoints, "config": config.model_dump()}, indent=1),
                   encoding="utf-8")
    from spag.devices import resolve_launcher

    try:
        subprocess.run([*launcher_command(resolve_launcher(launcher)), "-m", "spag.train.launch", str(job)],
                       check=True)
    finally:
        job.unlink(missing_ok=True)


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
    from spag.train.trainer import run_training

    (job_file,) = argv
    job = json.loads(Path(job_file).read_text(encoding="utf-8"))
    run_training(job["method"], job["model"], job["data"], job["output"], ref=job["ref"],
                 config=TrainConfig.model_validate(job["config"]), other_checkpoints=job["other_checkpoints"])


if __name__ == "__main__":
    main(sys.argv[1:])
