"""``spag train``: imitation learning (sft, sft-kl) and SPAG offline policy optimisation (offline-po)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

METHOD_HELP = "sft (weighted NLL), sft-kl (imitation learning), offline-po (SPAG)."


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train_command(
        method: str = typer.Option(..., "--method", help=METHOD_HELP),
        model: str = typer.Option(..., "--model", help="Policy to start from: an HF directory."),
        data: Path = typer.Option(..., "--data", help="Training rows: Parquet (file or shard dir) or JSONL."),
        output: Path = typer.Option(..., "-o", "--output", help="Output HF directory."),
        ref: Optional[str] = typer.Option(None, "--ref", help="Reference model (default: --model)."),
        learning_rate: Optional[float] = typer.Option(
            None, "--lr", "--learning-rate", help="Default 5e-6 (sft, sft-kl) or 2e-6 (offline-po)."),
        epochs: float = typer.Option(1.0, "--epochs", min=0.0),
        max_steps: int = typer.Option(-1, "--max-steps", min=-1, help="Stop after N optimiser steps (-1: epochs)."),
        batch_size: int = typer.Option(2, "--batch-size", min=1, help="Rows per device per micro-batch."),
        grad_accum: int = typer.Option(8, "--grad-accum", "--gradient-accumulation-steps", min=1),
        warmup_ratio: float = typer.Option(0.03, "--warmup-ratio", min=0.0, max=1.0),
        lr_scheduler: str = typer.Option(
            "cosine", "--lr-scheduler",
            help="cosine, linear, or warmup_decay (DeepSpeed's WarmupDecayLR, what the original code ran)."),
        weight_decay: float = typer.Option(0.0, "--weight-decay", min=0.0),
        max_grad_norm: float = typer.Option(1.0, "--max-grad-norm", min=0.0),
        max_length: int = typer.Option(2048, "--max-length", min=2, help="Tokens per row; prompts cut from the left."),
        kl_coeff: Optional[float] = typer.Option(
            None, "--kl-coeff", help="β: default 0.1 (sft-kl) or 0.2 (offline-po)."),
        clip_range: float = typer.Option(0.2, "--clip-range", help="ε of the clipped importance ratio."),
        sft_coeff: float = typer.Option(0.5, "--sft-coeff", help="α of the SFT term in offline-po."),
        reduction: str = typer.Option(
            "rows", "--reduction",
            help="offline-po: rows (Σ w·l / n per kind, the original's) or weights (Σ w·l / Σ w per kind)."),
        detach_advantage: bool = typer.Option(
            True, "--detach-advantage/--attached-advantage",
            help="offline-po: treat A = r − β·(log π − log π_ref) as a constant (the original kept it attached)."),
        gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing"),
        bf16: Optional[bool] = typer.Option(None, "--bf16/--no-bf16", help="Default: on where bf16 is fast (bf16 GPU, CPU with AVX512-BF16/AMX)."),
        tf32: Optional[bool] = typer.Option(None, "--tf32/--no-tf32", help="Default: on with an Ampere+ GPU."),
        device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: cuda if present)."),
        lora_r: int = typer.Option(0, "--lora-r", min=0, help="LoRA rank; 0 trains every weight."),
        lora_alpha: int = typer.Option(16, "--lora-alpha", min=1),
        lora_dropout: float = typer.Option(0.05, "--lora-dropout", min=0.0, max=1.0),
        lora_target_modules: str = typer.Option("all-linear", "--lora-target-modules",
                                                help="all-linear or comma-separated module names."),
        no_merge_lora: bool = typer.Option(False, "--no-merge-lora", help="Save LoRA adapters unmerged."),
        seed: int = typer.Option(42, "--seed"),
        deepspeed: Optional[Path] = typer.Option(None, "--deepspeed", help="DeepSpeed config JSON."),
        resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint."),
        overwrite: bool = typer.Option(False, "--overwrite",
                                       help="Replace a previous `spag train` output in OUTPUT (nothing else)."),
        ref_on_the_fly: bool = typer.Option(
            False, "--ref-on-the-fly", help="Run the reference model during training (two models)."),
        ref_cache_dir: Optional[Path] = typer.Option(
            None, "--ref-cache-dir", help="Where reference log-probs are cached (default: beside the data)."),
        ref_batch_size: int = typer.Option(8, "--ref-batch-size", min=1),
        live_dir: Optional[Path] = typer.Option(
            None, "--live-dir", help="dvclive directory (default: OUTPUT/../dvclive/<name of OUTPUT>)."),
        no_live: bool = typer.Option(False, "--no-live", help="Do not log to dvclive."),
        logging_steps: int = typer.Option(10, "--logging-steps", min=1),
        save_steps: int = typer.Option(500, "--save-steps", min=1, help="Checkpoint every N optimiser steps."),
        save_total_limit: int = typer.Option(2, "--save-total-limit", min=1),
        checkpoint_dir: Optional[Path] = typer.Option(
            None, "--checkpoint-dir", help="Intermediate checkpoints (default: OUTPUT/checkpoints)."),
        keep_checkpoints: bool = typer.Option(False, "--keep-checkpoints",
                                              help="Keep intermediate checkpoints after a finished run."),
        trust_remote_code: bool = typer.Option(False, "--trust-remote-code"),
    ) -> None:
        """Train a policy on training rows; write a plain HF directory with training_summary.json."""
        from spag.modeling import check_model
        from spag.train.losses import METHODS
        from spag.train.trainer import TrainConfig, run_training

        if method not in METHODS:
            raise typer.BadParameter(f"expected one of {', '.join(METHODS)}", param_hint="--method")
        check_model(model, "--model")
        if ref is not None:
            check_model(ref, "--ref")
        if deepspeed is not None and not deepspeed.is_file():
            raise typer.BadParameter(f"{deepspeed}: no such file", param_hint="--deepspeed")
        config = TrainConfig(
            learning_rate=learning_rate, epochs=epochs, max_steps=max_steps, batch_size=batch_size,
            grad_accum=grad_accum, warmup_ratio=warmup_ratio, lr_scheduler=lr_scheduler,
            weight_decay=weight_decay, max_grad_norm=max_grad_norm, max_length=max_length, kl_coeff=kl_coeff,
            clip_range=clip_range, sft_coeff=sft_coeff, reduction=reduction, detach_advantage=detach_advantage,
            gradient_checkpointing=gradient_checkpointing,
            bf16=bf16, tf32=tf32, device=device, lora_r=lora_r, lora_alpha=lora_alpha,
            lora_dropout=lora_dropout, lora_target_modules=lora_target_modules, merge_lora=not no_merge_lora,
            seed=seed, deepspeed=str(deepspeed) if deepspeed else None, resume=resume, overwrite=overwrite,
            ref_on_the_fly=ref_on_the_fly, ref_cache_dir=str(ref_cache_dir) if ref_cache_dir else None,
            ref_batch_size=ref_batch_size, live_dir=str(live_dir) if live_dir else None, live=not no_live,
            logging_steps=logging_steps, save_steps=save_steps, save_total_limit=save_total_limit,
            checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, keep_checkpoints=keep_checkpoints,
            trust_remote_code=trust_remote_code,
        )
        try:
            config.resolved(method)
        except ValueError as exc:
            raise typer.BadParameter(str(exc))
        run_training(method, model, data, output, ref=ref, config=config)
