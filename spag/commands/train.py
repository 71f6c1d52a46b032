"""``spag train``: imitation learning (sft, sft-kl) and SPAG offline policy optimisation (offline-po)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from spag.commands.options import checked, option
from spag.config import METHOD_HELP, TrainStep
from spag.config import TrainConfig as C


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train_command(
        method: str = typer.Option(..., "--method", help=METHOD_HELP),
        model: str = typer.Option(..., "--model", help="Policy to start from: an HF directory."),
        data: Path = typer.Option(..., "--data", help="Training rows: Parquet (file or shard dir) or JSONL."),
        output: Path = typer.Option(..., "-o", "--output", help="Output HF directory."),
        ref: str | None = typer.Option(None, "--ref", help="Reference model (default: --model)."),
        learning_rate: float | None = option(C, "learning_rate", "--lr", "--learning-rate"),
        epochs: float = option(C, "epochs"),
        max_steps: int = option(C, "max_steps"),
        batch_size: int = option(C, "batch_size"),
        grad_accum: int = option(C, "grad_accum", "--grad-accum", "--gradient-accumulation-steps"),
        warmup_ratio: float = option(C, "warmup_ratio"),
        lr_scheduler: str = option(C, "lr_scheduler"),
        weight_decay: float = option(C, "weight_decay"),
        max_grad_norm: float = option(C, "max_grad_norm"),
        max_length: int = option(C, "max_length"),
        truncation: str = option(C, "truncation"),
        kl_coeff: float | None = option(C, "kl_coeff"),
        clip_range: float = option(C, "clip_range"),
        sft_coeff: float = option(C, "sft_coeff"),
        reduction: str = option(C, "reduction"),
        detach_advantage: bool = option(C, "detach_advantage", "--detach-advantage/--attached-advantage"),
        gradient_checkpointing: bool = option(C, "gradient_checkpointing"),
        bf16: bool | None = option(C, "bf16", "--bf16/--no-bf16"),
        tf32: bool | None = option(C, "tf32", "--tf32/--no-tf32"),
        device: str | None = option(C, "device"),
        lora_r: int = option(C, "lora_r"),
        lora_alpha: int = option(C, "lora_alpha"),
        lora_dropout: float = option(C, "lora_dropout"),
        lora_target_modules: str = option(C, "lora_target_modules"),
        no_merge_lora: bool = typer.Option(False, "--no-merge-lora", help="Save LoRA adapters unmerged."),
        seed: int = option(C, "seed"),
        deepspeed: Path | None = option(C, "deepspeed"),
        resume: bool = option(C, "resume"),
        overwrite: bool = option(C, "overwrite"),
        ref_on_the_fly: bool = option(C, "ref_on_the_fly"),
        ref_cache_dir: Path | None = option(C, "ref_cache_dir"),
        ref_batch_size: int = option(C, "ref_batch_size"),
        live_dir: Path | None = option(C, "live_dir"),
        no_live: bool = typer.Option(False, "--no-live", help="Do not log to dvclive."),
        logging_steps: int = option(C, "logging_steps"),
        save_steps: int = option(C, "save_steps"),
        save_total_limit: int = option(C, "save_total_limit"),
        checkpoint_dir: Path | None = option(C, "checkpoint_dir"),
        keep_checkpoints: bool = option(C, "keep_checkpoints"),
        trust_remote_code: bool = option(C, "trust_remote_code"),
        launcher: str | None = typer.Option(None, "--launcher", help=TrainStep.model_fields["launcher"].description),
    ) -> None:
        """Train a policy on training rows; write a plain HF directory with training_summary.json."""
        # The options named after TrainConfig fields are its knobs (first statement: locals() holds only them).
        knobs = {name: value for name, value in locals().items() if name in C.model_fields}
        from spag.config import METHODS
        from spag.devices import check_launch
        from spag.io import check_distinct_paths
        from spag.modeling import check_model
        from spag.train.bookkeeping import CHECKPOINTS
        from spag.train.trainer import run_training

        if method not in METHODS:
            raise typer.BadParameter(f"expected one of {', '.join(METHODS)}", param_hint="--method")
        local = {"--model": model, "--ref": ref}  # a hub name is no path on this machine
        checkpoints = "--checkpoint-dir" if checkpoint_dir else f"the checkpoints (-o/{CHECKPOINTS})"
        check_distinct_paths({"--data": data, "--deepspeed": deepspeed,
                              **{name: path for name, path in local.items() if path and Path(path).exists()}},
                             {"-o": output, checkpoints: checkpoint_dir or output / CHECKPOINTS, "--live-dir": live_dir})
        check_launch(launcher, deepspeed)  # before any work: a bad launcher or DeepSpeed file is one line
        check_model(model, "--model", trust_remote_code)
        if ref is not None:
            check_model(ref, "--ref", trust_remote_code)
        config = checked(C, **knobs, merge_lora=not no_merge_lora, live=not no_live)
        from spag.preflight import cuda_problem, deepspeed_problems, launcher_problems, refuse

        refuse([p for p in (cuda_problem(), *launcher_problems("--launcher", launcher, source=""),
                            *deepspeed_problems("--deepspeed", deepspeed and str(deepspeed), source="")) if p])
        if launcher:
            import subprocess

            from spag.train.launch import launch

            try:
                launch(launcher, method, model, data, output, config, ref=ref)
            except subprocess.CalledProcessError as exc:
                print(f"error: training under {launcher!r} failed (exit code {exc.returncode}); the "
                      "processes' output is above", file=sys.stderr)
                raise SystemExit(exc.returncode or 1) from None
            return
        run_training(method, model, data, output, ref=ref, config=config)
