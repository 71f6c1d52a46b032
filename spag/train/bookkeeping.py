"""The bookkeeping of a training run: its output and checkpoint folders, the identity a checkpoint must
match to be continued, the resume point, publishing the finished model and reading its summary.

Every training run (:mod:`spag.train.job`'s offline methods, :mod:`spag.train.online`) goes through
these; none of them trains.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

from spag.config import TrainConfig
from spag.runtime.atomic import publish_folder
from spag.runtime.errors import DataError
from spag.runtime.fingerprint import differences, file_digest, model_fingerprint

SUMMARY_FILE = "training_summary.json"
CHECKPOINTS = "checkpoints"
IDENTITY_FILE = "run.json"  # in the checkpoint folder: the run its checkpoints belong to
# Settings that do not change what a run computes: a checkpoint continues a run whatever they are.
NOT_THE_RUN = {
    "resume",
    "overwrite",
    "live",
    "live_dir",
    "show_progress",
    "checkpoint_dir",
    "keep_checkpoints",
    "ref_cache_dir",
    "ref_batch_size",
    "logging_steps",
    "save_steps",
    "save_total_limit",
    "dataloader_num_workers",
    "device",
}
LENGTH_KNOBS = {"epochs", "max_steps"}  # `spag train --resume` may continue a run for longer (or shorter)
TRAIN_KIND = "train"
CHECKPOINTS_KIND = "train-checkpoints"
LIVE_KIND = (
    "train-live"  # the dvclive folder: dvclive replaces dvc.yaml, params.yaml, metrics.json, plots/ there
)


def live_dir_of(config: TrainConfig, output_dir: Path) -> Path:
    return Path(config.live_dir) if config.live_dir else output_dir.parent / "dvclive" / output_dir.name


def publish(staging: Path, output_dir: Path, checkpoint_dir: Path, keep_checkpoints: bool) -> None:
    """Swap the finished model into place (:func:`spag.runtime.atomic.publish_folder`); keep or drop the
    intermediate checkpoints (a checkpoint folder inside the output goes with the model, or first)."""
    inside = checkpoint_dir.resolve().is_relative_to(output_dir.resolve())
    if inside and checkpoint_dir.exists():
        if keep_checkpoints:
            target = staging / checkpoint_dir.resolve().relative_to(output_dir.resolve())
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(checkpoint_dir, target)
        else:
            remove_checkpoints(checkpoint_dir)
    publish_folder(staging, output_dir, last=SUMMARY_FILE)
    if not keep_checkpoints and not inside and checkpoint_dir.exists():
        remove_checkpoints(checkpoint_dir)


def remove_checkpoints(checkpoint_dir: Path) -> None:
    """Remove the checkpoints of the run in ``checkpoint_dir`` (each ``checkpoint-N`` and the run's identity
    file): what a run writes there, and nothing else."""
    for checkpoint in checkpoints_in(checkpoint_dir):
        shutil.rmtree(checkpoint)
    (checkpoint_dir / IDENTITY_FILE).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # the folder too, when that left it empty
        checkpoint_dir.rmdir()


def last_complete_checkpoint(folder: Path, say=print) -> str | None:
    """The newest ``checkpoint-N`` that reads back whole: its ``trainer_state.json`` (the Trainer writes it
    last) parses, and no weight, optimizer or state file in it is cut short (:func:`_broken_file`).

    A run killed while saving leaves a half-written checkpoint, and a full disk or a copy cut short a
    truncated one; resuming from it would fail or, worse, load a partial optimizer state, so it is passed
    over with a note and the previous complete one is used.
    """

    def step(path: Path) -> int:
        suffix = path.name.removeprefix("checkpoint-")
        return int(suffix) if suffix.isdigit() else -1

    for candidate in sorted(checkpoints_in(folder), key=step, reverse=True):
        try:
            json.loads((candidate / "trainer_state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written when the run was killed: passed over without a word, as always
        broken = next((problem for f in sorted(candidate.rglob("*")) if (problem := _broken_file(f))), None)
        if broken:
            say(f"note: {candidate.name} is damaged ({broken}); passing it over", flush=True)
            continue
        return str(candidate)
    return None


def _broken_file(path: Path) -> str | None:
    """Why a checkpoint's file cannot be loaded whole (None when it can): a torch file (``.pt``, ``.pth``,
    ``.bin``: a zip archive) whose central directory is missing, a ``.safetensors`` file shorter than its
    header says. Cheap: headers and the end of the file are read, not the tensors."""
    name = path.name
    try:
        if path.suffix in (".pt", ".pth", ".bin"):
            with zipfile.ZipFile(path):
                return None
        if path.suffix == ".safetensors":
            with path.open("rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(length))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
            size = path.stat().st_size
            return (
                None
                if size >= 8 + length + end
                else f"{name}: {size} bytes, its header needs {8 + length + end}"
            )
    except (OSError, ValueError, KeyError, TypeError, struct.error, zipfile.BadZipFile) as exc:
        return f"{name}: cut short or damaged ({exc})"
    return None


def checkpoints_in(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir() if p.is_dir() and p.name.startswith("checkpoint-")]


def checkpoint_dir_of(config: TrainConfig, output_dir: Path) -> Path:
    return Path(config.checkpoint_dir) if config.checkpoint_dir else output_dir / CHECKPOINTS


def run_identity(method: str, model, ref, data, config: TrainConfig, processes: int) -> dict:
    """What a checkpoint continues: the method, the bytes of model, reference and rows, the settings that
    shape training and the number of processes (the data order depends on it)."""
    if data is not None:
        data = Path(data)
        files = sorted(data.glob("*.parquet")) if data.is_dir() else [data]  # the shards read_records reads
    settings = config.model_dump(exclude=NOT_THE_RUN)
    return {
        "method": method,
        "model": model_fingerprint(model),
        "ref": model_fingerprint(ref),
        "data": [file_digest(f) for f in files] if data is not None else None,
        "processes": int(processes),
        **settings,
    }


def resume_point(
    checkpoint_dir: Path, identity: dict, resume: bool, other_checkpoints: str, say=print
) -> str | None:
    """The checkpoint to continue from: the newest complete one, if ``resume`` and it is of this run.

    Checkpoints of another run (other model, rows or settings) are never continued: with
    ``other_checkpoints="refuse"`` (``spag train --resume``) the run stops and says what differs, unless only
    the length (epochs, max_steps) changed; with ``"restart"`` (a pipeline stage, re-run because something
    changed) it starts from the beginning.
    """
    if not resume:
        return None
    latest = last_complete_checkpoint(checkpoint_dir, say)
    if latest is None:
        say(f"note: no checkpoint in {checkpoint_dir}; starting from the beginning", flush=True)
        return None
    try:
        saved = json.loads((checkpoint_dir / IDENTITY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    if saved == identity:
        return latest
    changed = differences(saved, identity) if saved else f"{IDENTITY_FILE} missing"
    lengthened = {
        key for key in set(saved) | set(identity) if saved.get(key) != identity.get(key)
    } <= LENGTH_KNOBS
    if saved and lengthened and other_checkpoints == "refuse":  # `spag train --resume` to train for longer
        say(
            f"note: continuing {latest} with another length ({changed}); the schedule follows the new length",
            flush=True,
        )
        return latest
    if other_checkpoints == "refuse":
        raise DataError(
            checkpoint_dir,
            None,
            f"its checkpoints are of another run ({changed}); run without --resume to start over",
        )
    say(
        f"note: the checkpoints in {checkpoint_dir} are of another run ({changed}); starting from the "
        "beginning",
        flush=True,
    )
    return None


def mean_loss(log_history: list[dict]) -> float | None:
    """The mean loss over every step of a resumed run, from the logged losses (the Trainer's own figure
    covers the steps since the resume only). Each logged loss is the mean over its logging window, so it
    counts once per step of that window."""
    total = steps = 0.0
    previous = 0
    for entry in sorted((e for e in log_history if "loss" in e and "step" in e), key=lambda e: e["step"]):
        window = entry["step"] - previous
        if window > 0:
            total, steps, previous = total + entry["loss"] * window, steps + window, entry["step"]
    return total / steps if steps else None


def read_summary(output_dir) -> dict:
    return json.loads((Path(output_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))
