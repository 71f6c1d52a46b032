"""``spag train``: imitation learning (sft, sft-kl) and SPAG offline policy optimisation (offline-po)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

from spag.commands.options import checked, knobs, with_knobs
from spag.config import METHOD_HELP, METHODS, TrainStep
from spag.config import TrainConfig as C
from spag.harness.claims import check_distinct_paths
from spag.harness.launch import launch
from spag.models.devices import check_launch
from spag.models.loading import check_model
from spag.pipeline.preflight import cuda_problem, deepspeed_problems, launcher_problems, refuse
from spag.train.bookkeeping import CHECKPOINTS

# Every knob of a training run, with these flags where the option has another spelling or a second form.
_FLAGS = {
    "learning_rate": ("--lr", "--learning-rate"),
    "grad_accum": ("--grad-accum", "--gradient-accumulation-steps"),
    "detach_advantage": ("--detach-advantage/--attached-advantage",),
    "bf16": ("--bf16/--no-bf16",),
    "tf32": ("--tf32/--no-tf32",),
    "merge_lora": ("--merge-lora/--no-merge-lora",),
    "live": ("--live/--no-live",),
}


def register(app: typer.Typer) -> None:
    @app.command("train")
    @with_knobs(knobs(C, exclude=("show_progress",), flags=_FLAGS), knobs(TrainStep, only=("launcher",)))
    def train_command(
        method: str = typer.Option(..., "--method", help=METHOD_HELP),
        model: str = typer.Option(..., "--model", help="Policy to start from: an HF directory."),
        data: Path = typer.Option(..., "--data", help="Training rows: Parquet (file or shard dir) or JSONL."),
        output: Path = typer.Option(..., "-o", "--output", help="Output HF directory."),
        ref: str | None = typer.Option(None, "--ref", help="Reference model (default: --model)."),
        **settings,
    ) -> None:
        """Train a policy on training rows; write a plain HF directory with training_summary.json."""
        from spag.harness.training import train

        if method not in METHODS:
            raise typer.BadParameter(f"expected one of {', '.join(METHODS)}", param_hint="--method")
        launcher, deepspeed, checkpoint_dir = (
            settings["launcher"],
            settings["deepspeed"],
            settings["checkpoint_dir"],
        )
        local = {"--model": model, "--ref": ref}  # a hub name is no path on this machine
        checkpoints = "--checkpoint-dir" if checkpoint_dir else f"the checkpoints (-o/{CHECKPOINTS})"
        check_distinct_paths(
            {
                "--data": data,
                "--deepspeed": deepspeed,
                **{name: path for name, path in local.items() if path and Path(path).exists()},
            },
            {
                "-o": output,
                checkpoints: checkpoint_dir or output / CHECKPOINTS,
                "--live-dir": settings["live_dir"],
            },
        )
        check_launch(launcher, deepspeed)  # before any work: a bad launcher or DeepSpeed file is one line
        check_model(model, "--model", settings["trust_remote_code"])
        if ref is not None:
            check_model(ref, "--ref", settings["trust_remote_code"], tokenizer=False)
        config = checked(C, **{name: value for name, value in settings.items() if name in C.model_fields})

        refuse(
            [
                p
                for p in (
                    cuda_problem(),
                    *launcher_problems("--launcher", launcher, source=""),
                    *deepspeed_problems("--deepspeed", deepspeed and str(deepspeed), source=""),
                )
                if p
            ]
        )
        if launcher:
            try:
                launch(launcher, method, model, data, output, config, ref=ref)
            except subprocess.CalledProcessError as exc:
                print(
                    f"error: training under {launcher!r} failed (exit code {exc.returncode}); the "
                    "processes' output is above",
                    file=sys.stderr,
                )
                raise SystemExit(exc.returncode or 1) from None
            return
        train(method, model, data, output, ref=ref, config=config)
