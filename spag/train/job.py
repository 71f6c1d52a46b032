"""One training job on :class:`spag.train.trainer.SpagTrainer`: :func:`run_training`, used by ``spag train``
and the DVC stages, in steps:

1. data (:func:`_read_data`, :func:`_encode`): read and check the rows, tokenise them (a row longer than
   ``max_length`` is shortened by ``truncation``: it gives up its oldest history lines or is left out, or,
   the original's way, loses its first tokens); :func:`start_run` sets up the processes in between;
2. reference (:func:`_reference_step`): log-probs from the cache beside the data, or one pass of the
   reference model before training (so training holds one model), or on the fly (two models; under
   DeepSpeed the reference is a frozen part of the engine, in the policy's precision, as in the original);
3. build (:func:`_build_step`): the policy (LoRA when asked), the callbacks (:mod:`spag.train.callbacks`,
   with the harness's experiment tracking when given) and the :class:`SpagTrainer` (a DeepSpeed run's
   process is the harness's to prepare first: :mod:`spag.harness.environment`);
4. train: ``Trainer.train``, logging loss, KL, clip fraction, mean ratio and per-term losses;
5. save (:func:`_save_step`): a plain HF directory (LoRA merged unless asked otherwise) with
   ``training_summary.json``, then the intermediate checkpoints removed unless ``keep_checkpoints``.

The output directory only becomes a model directory at the very end, by a rename, so a killed run never
leaves something that looks finished; ``resume=True`` continues from the latest checkpoint. Which folders a
run may write is the harness's to check before it starts (:mod:`spag.harness.training`).
:func:`start_run`, :func:`load_policy` and :func:`finish_run` serve online self-play too
(:mod:`spag.train.online`).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from transformers import TrainingArguments

from spag.config import TrainConfig
from spag.models.devices import check_launch
from spag.models.loading import (
    bf16_by_default,
    load_tokenizer,
    pick_device,
    save_checkpoint,
    set_tf32,
    setup_special_tokens,
)
from spag.players.provenance import machine
from spag.rewards.rows import read_rows
from spag.runtime.atomic import followed, write_json_atomic
from spag.runtime.console import summary
from spag.runtime.errors import DataError
from spag.train.bookkeeping import (
    IDENTITY_FILE,
    SUMMARY_FILE,
    checkpoint_dir_of,
    checkpoints_in,
    mean_loss,
    publish,
    remove_checkpoints,
    resume_point,
    run_identity,
)
from spag.train.callbacks import Tracking, run_callbacks, show_postfix_progress
from spag.train.data import Collator, RowDataset, check_rows_for_method, empty_completions, encode_rows
from spag.train.losses import METHODS, SFT
from spag.train.reference import load_reference_model, reference_logprobs
from spag.train.schedules import DEEPSPEED_SCHEDULES
from spag.train.trainer import SpagTrainer, attach_reference, detach_reference

__all__ = ["TrainConfig", "finish_run", "load_policy", "run_training", "start_run"]


# ------------------------------------------------------------------------------------------ helpers


def _precision(config: TrainConfig, device: str) -> tuple[bool, bool]:
    """(bf16, tf32); bf16 None means bfloat16 autocast on a GPU that has it, float32 on a CPU
    (:func:`spag.models.loading.bf16_by_default`)."""
    on_cuda = device.startswith("cuda")
    bf16 = config.bf16 if config.bf16 is not None else bf16_by_default(device)
    tf32 = (
        config.tf32 if config.tf32 is not None else (on_cuda and torch.cuda.get_device_capability()[0] >= 8)
    )
    return bool(bf16), bool(tf32)


def _checkpointing_arguments(enabled: bool) -> dict:
    """Gradient checkpointing under the name this transformers version uses (renamed in v5)."""
    names = {f.name for f in fields(TrainingArguments)}
    prefix = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return {prefix: enabled, f"{prefix}_kwargs": {"use_reentrant": False} if enabled else None}


def _warmup_arguments(ratio: float) -> dict:
    """Warm-up as a ratio of the training steps: ``warmup_ratio`` before v5, a float ``warmup_steps`` after."""
    names = {f.name for f in fields(TrainingArguments)}
    return {"warmup_ratio": ratio} if "warmup_ratio" in names else {"warmup_steps": ratio}


def _same_model(a, b) -> bool:
    pa, pb = Path(str(a)), Path(str(b))
    if pa.exists() and pb.exists():
        return pa.resolve() == pb.resolve()
    return str(a) == str(b)


def load_policy(model_path, config: TrainConfig, tokenizer, bf16: bool = False):
    """The model to train: float32 master weights, bf16 runs under autocast (or DeepSpeed's bf16 mode). With
    LoRA under bf16 the frozen base is held in bfloat16, half the memory and the bandwidth of each step;
    the adapters, the weights that learn, stay float32 (PEFT's own upcast)."""
    from transformers import AutoModelForCausalLM, set_seed

    frozen_in_bf16 = bf16 and config.lora_r > 0
    model = AutoModelForCausalLM.from_pretrained(
        str(model_path),
        dtype=torch.bfloat16 if frozen_in_bf16 else torch.float32,
        trust_remote_code=config.trust_remote_code,
    )
    setup_special_tokens(tokenizer, model)
    if config.lora_r > 0:
        from peft import LoraConfig, get_peft_model

        set_seed(config.seed)
        targets = config.lora_target_modules
        lora = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",")],
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
        if config.gradient_checkpointing:
            model.enable_input_require_grads()
    return model


def _save_final(trainer, tokenizer, staging: Path, config: TrainConfig, zero3: bool) -> None:
    """Write the trained model as a plain HF directory at ``staging`` (main process writes)."""
    main = trainer.is_world_process_zero()
    model = trainer.accelerator.unwrap_model(trainer.model)
    detach_reference(model)  # the saved model is the policy alone
    is_peft = hasattr(model, "merge_and_unload")
    if zero3:
        # Parameters are partitioned: the Trainer gathers them (needs
        # stage3_gather_16bit_weights_on_model_save, set in configs/deepspeed_zero3.json).
        raw = staging.parent / f".{staging.name}.raw"
        trainer.save_model(str(raw))
        if main:
            setup_special_tokens(tokenizer)
            tokenizer.save_pretrained(raw)
            (raw / "training_args.bin").unlink(missing_ok=True)
            if staging.exists():
                shutil.rmtree(staging)
            os.replace(raw, staging)
        return
    if not main:
        return
    if is_peft and config.merge_lora:
        model = model.merge_and_unload()
    if is_peft and not config.merge_lora:
        tmp = staging.parent / f".{staging.name}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        model.save_pretrained(tmp)
        setup_special_tokens(tokenizer)
        tokenizer.save_pretrained(tmp)
        if staging.exists():
            shutil.rmtree(staging)
        os.replace(tmp, staging)
        return
    if staging.exists():  # a killed run's finished model, never published: this run's replaces it
        shutil.rmtree(staging)
    save_checkpoint(model, tokenizer, staging)


# ------------------------------------------------------------------------------------------ the step


@dataclass
class _Run:
    """What the steps of one training run share."""

    method: str
    model: str
    ref: str
    data: Path | None
    output_dir: Path
    checkpoint_dir: Path
    config: TrainConfig
    args: TrainingArguments
    resume_from: str | None
    started: float

    @property
    def main(self) -> bool:
        return self.args.process_index == 0

    @property
    def needs_ref(self) -> bool:
        return self.method != SFT

    def wait_for_everyone(self) -> None:
        state = self.args.distributed_state
        if state is not None and state.num_processes > 1:
            state.wait_for_everyone()


def with_knobs(config: TrainConfig | None, knobs: dict) -> TrainConfig:
    """``config`` (the defaults when None) with the fields ``knobs`` names set; TypeError for any other."""
    unknown = set(knobs) - set(TrainConfig.model_fields)
    if unknown:
        raise TypeError(f"unknown training option(s): {', '.join(sorted(unknown))}")
    return TrainConfig(**{**(config or TrainConfig()).model_dump(), **knobs})


def run_training(
    method: str,
    model,
    data,
    output_dir,
    ref=None,
    config: TrainConfig | None = None,
    other_checkpoints: str = "refuse",
    tracking: Tracking | None = None,
    **knobs,
) -> Path:
    """Train ``model`` on the rows in ``data`` with ``method`` and save the result to ``output_dir``.

    ``method`` is ``sft``, ``sft-kl`` (imitation learning) or ``offline-po`` (SPAG); ``ref`` is the
    reference model (default: ``model`` itself). Knobs are the fields of :class:`spag.config.TrainConfig`,
    given as keywords or as ``config``. ``other_checkpoints`` says what ``resume`` does with checkpoints of
    another run: ``refuse`` or ``restart`` (see :func:`resume_point`). ``tracking`` adds experiment
    tracking (:class:`spag.train.callbacks.Tracking`). Returns ``output_dir``.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    config = with_knobs(config, knobs).resolved(method)
    check_launch(None, config.deepspeed, deepspeed_key="deepspeed")  # before the data: a bad file is one line
    rows, tokenizer = _read_data(
        method, model, data, config
    )  # bad rows stop the run before anything is written
    run = start_run(method, model, data, output_dir, ref, config, other_checkpoints)
    encoded = _encode(run, rows, tokenizer)
    ref_info = _reference_step(run, encoded, tokenizer)
    trainer = _build_step(run, encoded, tokenizer, ref_info, tracking)
    result = trainer.train(resume_from_checkpoint=run.resume_from)
    _save_step(run, trainer, tokenizer, encoded, result, ref_info, tracking)
    run.wait_for_everyone()
    return run.output_dir


def start_run(
    method: str,
    model,
    data,
    output_dir,
    ref,
    config: TrainConfig,
    other_checkpoints: str,
    *,
    arguments: dict | None = None,
    identity: dict | None = None,
) -> _Run:
    """Check the run and set up the processes (the Trainer's arguments).

    ``arguments`` replaces or adds Trainer arguments (``arguments["class"]``: another TrainingArguments
    class, TRL's GRPOConfig for online self-play); ``identity`` adds what else a checkpoint must match.
    """
    ref = ref if ref is not None else model
    started = time.time()
    output_dir = followed(output_dir)
    checkpoint_dir = followed(checkpoint_dir_of(config, output_dir))
    # The Trainer's arguments come first: they set up the processes (and DeepSpeed's ZeRO-3 loading).
    args = _training_arguments(config, checkpoint_dir, pick_device(config.device), **(arguments or {}))
    identity = {**run_identity(method, model, ref, data, config, args.world_size), **(identity or {})}
    resume_from = resume_point(
        checkpoint_dir,
        identity,
        config.resume,
        other_checkpoints,
        say=print if args.process_index == 0 else lambda *a, **k: None,
    )
    run = _Run(
        method,
        model,
        ref,
        Path(data) if data is not None else None,
        output_dir,
        checkpoint_dir,
        config,
        args,
        resume_from,
        started,
    )
    if run.main and resume_from is None:
        if checkpoints_in(checkpoint_dir):
            remove_checkpoints(checkpoint_dir)
            if not config.resume:
                print(
                    f"note: removed old checkpoints in {checkpoint_dir} (pass --resume to continue from them)"
                )
        write_json_atomic(checkpoint_dir / IDENTITY_FILE, identity)
    if run.main and resume_from is not None:
        print(f"note: resuming from {resume_from}", flush=True)
    run.wait_for_everyone()
    return run


def _training_arguments(
    config: TrainConfig, checkpoint_dir: Path, device: str, **overrides
) -> TrainingArguments:
    """The Trainer's arguments of a run; ``overrides`` replace or add some (``class``: the arguments' class)."""
    use_cpu = device == "cpu"
    configured = bool(config.deepspeed and use_cpu)  # joined over gloo by spag.harness.environment
    bf16, tf32 = _precision(config, device)
    if device.startswith("cuda"):
        set_tf32(tf32)  # here only: the Trainer's own tf32 switch stays unset (see set_tf32)
    elif config.tf32:
        raise DataError(
            "--tf32", None, "TF32 is a mode of NVIDIA GPUs (Ampere or newer); this run is on the CPU"
        )
    arguments = overrides.pop("class", TrainingArguments)
    return arguments(
        **{
            **dict(
                output_dir=str(checkpoint_dir),
                per_device_train_batch_size=config.batch_size,
                gradient_accumulation_steps=config.grad_accum,
                num_train_epochs=config.epochs,
                max_steps=config.max_steps,
                learning_rate=config.learning_rate,
                # DeepSpeed's schedules are built by SpagTrainer.create_scheduler; "linear" only fills the argument.
                lr_scheduler_type="linear"
                if config.lr_scheduler in DEEPSPEED_SCHEDULES
                else config.lr_scheduler,
                **_warmup_arguments(config.warmup_ratio),
                weight_decay=config.weight_decay,
                max_grad_norm=config.max_grad_norm,
                **_checkpointing_arguments(config.gradient_checkpointing),
                train_sampling_strategy="group_by_length" if config.group_by_length else "random",
                bf16=bf16,
                tf32=None,
                use_cpu=use_cpu,
                seed=config.seed,
                deepspeed=config.deepspeed,
                logging_steps=config.logging_steps,
                logging_first_step=True,
                save_strategy="steps",
                save_steps=config.save_steps,
                save_total_limit=config.save_total_limit,
                report_to=list(config.report_to) or "none",  # dvclive by its own callback (run_callbacks)
                remove_unused_columns=False,
                label_names=[],
                include_num_input_tokens_seen="non_padding",
                dataloader_num_workers=config.dataloader_num_workers,
                dataloader_pin_memory=not use_cpu,
                disable_tqdm=not config.show_progress,
                ddp_find_unused_parameters=False,
                accelerator_config={"use_configured_state": configured},
            ),
            **overrides,
        }
    )


def _read_data(method: str, model, data, config: TrainConfig):
    """The checked training rows and the policy's tokenizer."""
    rows = read_rows(data)
    check_rows_for_method(rows, method, data)
    warning = empty_completions(rows, data)
    if warning and int(os.environ.get("RANK", "0")) == 0:
        print(warning, file=sys.stderr, flush=True)
    return rows, load_tokenizer(model, trust_remote_code=config.trust_remote_code)


def _encode(run: _Run, rows, tokenizer):
    """Rows -> token ids; a row too long for max_length is shortened by ``truncation``
    (:mod:`spag.train.data`)."""
    config = run.config
    encoded = encode_rows(
        rows,
        tokenizer,
        config.max_length,
        show_progress=config.show_progress and run.main,
        truncation=config.truncation,
    )
    if not len(encoded):
        raise DataError(run.data, None, f"no row fits max_length {config.max_length} tokens")
    if run.main and encoded.rows_cut_left:
        print(f"note: max length {config.max_length}: {encoded.rows_cut_left} row(s) cut from the left")
    if run.main and (encoded.rows_too_long or encoded.prompts_shortened):
        print(
            f"note: max length {config.max_length}: {encoded.prompts_shortened} prompt(s) gave up "
            f"{encoded.history_lines_dropped} oldest history line(s); {encoded.rows_too_long} row(s) too long "
            "even so were left out"
        )
    return encoded


def _reference_step(run: _Run, encoded, tokenizer) -> dict:
    """Reference log-probs before the policy is loaded, so only one model is in memory at a time.

    Stored on ``encoded``; returns how they were had (for the summary).
    """
    config = run.config
    if not run.needs_ref:
        return {"mode": "none"}
    if config.ref_on_the_fly:
        return {"mode": "on-the-fly"}
    started = time.time()
    logprobs, cache_file, reused = reference_logprobs(
        run.data,
        encoded,
        run.ref,
        tokenizer.pad_token_id,
        batch_size=config.ref_batch_size,
        cache_dir=config.ref_cache_dir,
        autocast_dtype=torch.bfloat16 if run.args.bf16 else None,
        trust_remote_code=config.trust_remote_code,
        state=run.args.distributed_state,
        show_progress=config.show_progress,
    )
    encoded.ref_logprobs = logprobs
    if run.main:
        print(f"reference log-probs {'reused from' if reused else 'cached in'} {cache_file}")
    return {
        "mode": "precomputed",
        "cache": str(cache_file),
        "reused": reused,
        "seconds": round(time.time() - started, 3),
    }


def _build_step(run: _Run, encoded, tokenizer, ref_info: dict, tracking: Tracking | None):
    """The policy (and the reference model when it runs on the fly), the callbacks and the trainer."""
    config = run.config
    policy = load_policy(run.model, config, tokenizer, bf16=bool(run.args.bf16))
    ref_model, ref_without_adapter = None, False
    if ref_info["mode"] == "on-the-fly":
        if config.lora_r > 0 and _same_model(run.ref, run.model):
            ref_without_adapter = True
        elif run.args.deepspeed:
            attach_reference(policy, run.ref, config)
        else:
            ref_model = load_reference_model(
                run.ref, run.args.device, trust_remote_code=config.trust_remote_code
            )
    callbacks = run_callbacks(run, tracking)
    trainer = SpagTrainer(
        model=policy,
        args=run.args,
        data_collator=Collator(tokenizer.pad_token_id, padding_free=config.padding_free),
        train_dataset=RowDataset(encoded),
        processing_class=tokenizer,
        callbacks=callbacks,
        method=run.method,
        kl_coeff=config.kl_coeff,
        clip_range=config.clip_range,
        sft_coeff=config.sft_coeff,
        lr_scheduler=config.lr_scheduler,
        detach_advantage=config.detach_advantage,
        reduction=config.reduction,
        ref_model=ref_model,
        ref_is_base_without_adapter=ref_without_adapter,
        group_by_prompt=config.group_by_prompt,
        batch_rebalance=config.batch_rebalance,
        step_tokens=config.step_tokens,
    )
    show_postfix_progress(trainer)
    return trainer


def _provenance(run: _Run) -> dict:
    """How the run computed (device, bfloat16 autocast as resolved, processes) and on what machine."""
    args = run.args
    return {
        "device": str(args.device),
        "bf16": bool(args.bf16),
        "processes": int(args.world_size),
        "deepspeed": bool(args.deepspeed),
        **machine(),
    }


def _save_step(
    run: _Run, trainer: SpagTrainer, tokenizer, encoded, result, ref_info: dict, tracking: Tracking | None
) -> None:
    """Save the model, write its summary, swap it into place and tell the tracking."""
    details = {
        "rows": len(encoded),
        "prompts_shortened": encoded.prompts_shortened,
        "history_lines_dropped": encoded.history_lines_dropped,
        "rows_too_long": encoded.rows_too_long,
        "reference": ref_info,
    }
    finish_run(run, trainer, tokenizer, result, tracking, details, f"{len(encoded)} rows")


def finish_run(
    run: _Run, trainer, tokenizer, result, tracking: Tracking | None, details: dict, trained_on: str
) -> None:
    """Save the model of any run on the HF Trainer (SpagTrainer, TRL's GRPOTrainer), write its summary
    (the common figures plus the method's ``details``), swap it into place and tell the tracking."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    config = run.config
    trainer.ref_model = None  # the reference model (on the fly) is not needed for saving
    staging = run.output_dir.parent / f".{run.output_dir.name}.final"
    _save_final(trainer, tokenizer, staging, config, is_deepspeed_zero3_enabled())
    elapsed = time.time() - run.started
    tokens = int(trainer.state.num_input_tokens_seen)
    train_seconds = float(result.metrics.get("train_runtime", elapsed))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    record = {
        "method": run.method,
        "model": str(run.model),
        "ref": str(run.ref) if run.needs_ref else None,
        "data": str(run.data),
        **details,
        "steps": int(trainer.state.global_step),
        "epochs": float(trainer.state.epoch or 0.0),
        "final_loss": float(losses[-1]) if losses else None,
        "mean_loss": mean_loss(trainer.state.log_history) if run.resume_from else float(result.training_loss),
        "tokens": tokens,
        "train_seconds": round(train_seconds, 3),
        "total_seconds": round(elapsed, 3),
        "tokens_per_second": round(tokens / train_seconds, 1) if train_seconds > 0 else None,
        "resumed_from": str(run.resume_from) if run.resume_from else None,
        "lora": {"r": config.lora_r, "merged": config.merge_lora} if config.lora_r > 0 else None,
        "config": config.model_dump(),
        "provenance": _provenance(run),
    }
    if not run.main:
        return
    write_json_atomic(staging / SUMMARY_FILE, record)
    publish(staging, run.output_dir, run.checkpoint_dir, config.keep_checkpoints)
    if tracking is not None:
        tracking.finish(record)
    loss_text = f"{record['final_loss']:.4f}" if record["final_loss"] is not None else "n/a"
    summary(
        "train",
        f"{run.method}: {record['steps']} steps on {trained_on}, final loss "
        f"{loss_text}, {tokens} tokens in {train_seconds:.1f}s -> {run.output_dir}",
    )
