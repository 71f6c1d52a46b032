"""A training run under a launcher (``torchrun``, ``accelerate launch``): its settings travel as a file.

The pipeline writes the run (method, paths and every :class:`spag.config.TrainConfig` knob) to a JSON
file and starts ``LAUNCHER -m spag.train.launch FILE``; each launched process reads the file back,
validated by the same schema, and calls :func:`spag.train.trainer.run_training`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from spag.config import TrainConfig


def launch(launcher: str, method: str, model, data, output, config: TrainConfig) -> None:
    """Run one training job under ``launcher``; raise CalledProcessError when it fails."""
    output = Path(output)
    job = output.parent / f".{output.name}.train-job.json"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(json.dumps({"method": method, "model": os.fspath(model), "data": os.fspath(data),
                               "output": os.fspath(output), "config": config.model_dump()}, indent=1),
                   encoding="utf-8")
    try:
        subprocess.run([*shlex.split(launcher), "-m", "spag.train.launch", str(job)], check=True)
    finally:
        job.unlink(missing_ok=True)


def main(argv: list[str]) -> None:
    from spag.train.trainer import run_training

    (job_file,) = argv
    job = json.loads(Path(job_file).read_text(encoding="utf-8"))
    run_training(job["method"], job["model"], job["data"], job["output"],
                 config=TrainConfig.model_validate(job["config"]))


if __name__ == "__main__":
    main(sys.argv[1:])
