"""The HF Trainer subclass of imitation learning and SPAG offline policy optimisation.

:class:`SpagTrainer` is a thin subclass of ``transformers.Trainer`` (TRL style): ``compute_loss`` runs the
model once, takes the completion log-likelihoods and hands them to the pure loss functions of
:mod:`spag.train.losses`. Everything else (optimiser, schedule and warm-up (plus the original's
DeepSpeed's ``warmup_decay``, :mod:`spag.train.schedules`), gradient accumulation,
gradient checkpointing, bf16, DeepSpeed, checkpoints and resuming) is the HF Trainer's; TF32 is set by
:func:`spag.models.loading.set_tf32` alone.

The reference model runs one of three ways: its log-probs come with the batch (computed before training,
:mod:`spag.train.reference`), it is a second model, or, under DeepSpeed, it is a frozen submodule of the
policy (:func:`attach_reference`), as in the original. The job around the trainer (data, reference pass,
building, saving) is :mod:`spag.train.job`.
"""

from __future__ import annotations

import functools

import torch
from transformers import Trainer
from transformers.trainer_pt_utils import BatchRebalanceSampler

from spag.config import TrainConfig
from spag.train.losses import SFT, step_rows
from spag.train.losses import compute_loss as method_loss
from spag.train.reference import _accepts, model_forward_logprobs
from spag.train.sampling import PromptGroupedSampler, TokenBudgetSampler
from spag.train.schedules import DEEPSPEED_SCHEDULES, warmup_decay_schedule

__all__ = ["DeepSpeedSchedules", "SpagTrainer", "attach_reference", "detach_reference", "step_shares"]


REFERENCE_SUBMODULE = "spag_reference"  # the on-the-fly reference under DeepSpeed (see attach_reference)


def attach_reference(policy, ref_path, config: TrainConfig) -> None:
    """Load the frozen reference as a submodule of the policy, as the original code did: DeepSpeed then
    partitions it (ZeRO-3) and casts it (bf16) with the policy, so the reference runs in the policy's own
    precision and the importance ratio is exactly 1 before the first update. Removed before saving.

    Checkpoints leave it out (:meth:`SpagTrainer.save_model`): a 7B reference is 13.5 GB of 16-bit weights
    and as much again of DeepSpeed's frozen-parameter fragments in every checkpoint, and it never changes. A
    resumed run loads it from ``ref_path`` again, so its keys are allowed to be missing from a checkpoint."""
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(
        str(ref_path), dtype=torch.float32, trust_remote_code=config.trust_remote_code
    )
    ref.requires_grad_(False)
    ref.eval()
    policy.add_module(REFERENCE_SUBMODULE, ref)
    policy.register_load_state_dict_post_hook(_reference_not_in_checkpoints)


def _reference_not_in_checkpoints(module, incompatible_keys) -> None:
    """A checkpoint without the reference's weights loads strictly: the reference is loaded from its path."""
    incompatible_keys.missing_keys[:] = [
        key for key in incompatible_keys.missing_keys if not key.startswith(REFERENCE_SUBMODULE + ".")
    ]


def detach_reference(model) -> None:
    if hasattr(model, REFERENCE_SUBMODULE):
        delattr(model, REFERENCE_SUBMODULE)


def _base_model(model):
    """The transformers model under any accelerate / DDP / DeepSpeed / peft wrapping."""
    while hasattr(model, "module"):
        model = model.module
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model


def step_shares(batches, world_size: int, device=None) -> torch.Tensor:
    """A micro-batch's share of its optimiser step's rows: :func:`spag.train.losses.step_rows` over the step's
    micro-batches on every process, divided by their number, since the Trainer divides each micro-batch's
    loss by its micro-batches and the processes average their gradients. Summed over the processes on the
    device (``device``, where the process group's collectives run): nothing is read back to the host."""
    shares = (step_rows(batches) / (world_size * len(batches))).to(device)
    if world_size > 1:
        torch.distributed.all_reduce(shares)
    return shares


class DeepSpeedSchedules:
    """A Trainer mixin: the HF Trainer's schedules, plus DeepSpeed's ``warmup_decay`` ones
    (:mod:`spag.train.schedules`), named by ``self.schedule`` (the ``lr_scheduler`` setting)."""

    schedule = "cosine"

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.schedule not in DEEPSPEED_SCHEDULES:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            self.lr_scheduler = warmup_decay_schedule(
                self.optimizer if optimizer is None else optimizer,
                self.args.get_warmup_steps(num_training_steps),
                num_training_steps,
                self.schedule,
            )
            self._created_lr_scheduler = True
        return self.lr_scheduler


class SpagTrainer(DeepSpeedSchedules, Trainer):
    """``Trainer`` whose loss is one of :mod:`spag.train.losses`, with its statistics logged."""

    # compute_loss returns a per-micro-batch mean: the Trainer divides it for gradient accumulation.
    loss_is_scaled_for_ga = False
    group_by_prompt = batch_rebalance = False  # how the batches are made (see _get_train_sampler)
    step_tokens: int | None = None  # batch_rebalance: steps of about this many tokens, not of fixed rows
    _step_rows: torch.Tensor | None = None  # batch_rebalance: the step's rows (see get_batch_samples)

    def __init__(
        self,
        *args,
        method: str,
        kl_coeff: float,
        clip_range: float,
        sft_coeff: float,
        detach_advantage: bool = True,
        reduction: str = "rows",
        ref_model=None,
        ref_is_base_without_adapter: bool = False,
        lr_scheduler: str = "cosine",
        group_by_prompt: bool = False,
        batch_rebalance: bool = False,
        step_tokens: int | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.group_by_prompt = group_by_prompt
        self.batch_rebalance = batch_rebalance
        self.step_tokens = step_tokens
        self.schedule = lr_scheduler
        self.method = method
        self.kl_coeff = kl_coeff
        self.clip_range = clip_range
        self.sft_coeff = sft_coeff
        self.detach_advantage = detach_advantage
        self.reduction = reduction
        self.ref_model = ref_model
        self.ref_is_base_without_adapter = ref_is_base_without_adapter
        self._keeps_logits = _accepts(_base_model(self.model), "logits_to_keep")
        # One process on a CPU: each step's rows run in groups without the batch's padding (see
        # model_forward_logprobs); on a GPU a padded batch is one efficient call.
        self._unpadded = (
            not self.is_deepspeed_enabled and self.args.world_size == 1 and self.args.device.type == "cpu"
        )
        self._shared_prefix = self._unpadded and group_by_prompt  # see model_forward_logprobs
        self._stat_sums: dict[str, torch.Tensor] = {}
        self._stat_counts: dict[str, int] = {}
        self.last_logged_loss: float | None = None

    def _get_train_sampler(self, train_dataset=None):
        """The HF Trainer's sampler (random or by length), batches of rows whose prompts begin alike, or
        transformers' micro-batches of balanced cost (seeded by the run's seed, which the Trainer's own
        ``batch_rebalance`` strategy leaves at 42), in steps of fixed rows or of about ``step_tokens``."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.batch_rebalance:
            args = self.args
            lengths = [len(ids) for ids in dataset.encoded.input_ids]
            processes = {
                "dp_size": args.world_size,
                "grad_accum": args.gradient_accumulation_steps,
                "seed": args.seed,
                "rank": args.process_index,
            }
            if self.step_tokens:
                return TokenBudgetSampler(lengths, self.step_tokens, **processes)
            return BatchRebalanceSampler(
                lengths=lengths,
                effective_batch_size=args.train_batch_size
                * args.gradient_accumulation_steps
                * args.world_size,
                drop_last=args.dataloader_drop_last,
                **processes,
            )
        if self.group_by_prompt:
            return PromptGroupedSampler(dataset.encoded, self.args.train_batch_size, self.args.seed)
        return super()._get_train_sampler(train_dataset)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The micro-batches of one optimiser step; with ``batch_rebalance`` the rows of the whole step (their
        counts and weights by kind, over its processes and micro-batches) are kept for the step's losses to
        divide by (:func:`spag.train.losses.compute_loss`). Kept beside the batches, not in them: the Trainer
        would cast them to bfloat16 under DeepSpeed."""
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        self._step_rows = None
        if self.batch_rebalance and batches:
            self._step_rows = step_shares(batches, self.args.world_size, device)
        return batches, num_items

    def _holds_reference(self) -> bool:
        return self.is_deepspeed_enabled and hasattr(
            self.accelerator.unwrap_model(self.model), REFERENCE_SUBMODULE
        )

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """An intermediate checkpoint's weights are the policy's alone, the in-engine reference left out
        (the final save detaches the reference first and takes the usual path)."""
        if not self._holds_reference():
            return super().save_model(output_dir, _internal_call)
        if self.deepspeed.zero_optimization_partition_weights():  # ZeRO-3: gathered layer by layer
            state = self.deepspeed._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)
        else:
            state = self.accelerator.get_state_dict(self.deepspeed)
        if self.args.should_save:
            state = {k: v for k, v in (state or {}).items() if not k.startswith(REFERENCE_SUBMODULE + ".")}
            self._save(output_dir or self.args.output_dir, state_dict=state)
        return None

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        """DeepSpeed's checkpoint without the frozen reference (its weights and fragments); the rest, the
        scheduler included, as the Trainer saves it."""
        if not self._holds_reference():
            return super()._save_optimizer_and_scheduler(output_dir)
        engine = self.model_wrapped
        engine.save_checkpoint = functools.partial(
            type(engine).save_checkpoint, engine, exclude_frozen_parameters=True
        )
        try:
            return super()._save_optimizer_and_scheduler(output_dir)
        finally:
            del engine.save_checkpoint  # the class's method again

    def _reference_logprobs(self, model, inputs):
        with torch.no_grad():
            if self.ref_model is None and not self.ref_is_base_without_adapter:
                # The reference inside the policy (DeepSpeed): the engine gathers and casts it as the policy.
                ref = self.accelerator.unwrap_model(model).get_submodule(REFERENCE_SUBMODULE)
                ref.eval()
                return model_forward_logprobs(
                    ref,
                    inputs,
                    self._keeps_logits,
                    unpadded=self._unpadded,
                    shared_prefix=self._shared_prefix,
                ).detach()
            if self.ref_is_base_without_adapter:
                # LoRA on the reference itself: the base weights with adapters switched off.
                peft_model = self.accelerator.unwrap_model(model)
                was_training = peft_model.training
                peft_model.eval()
                with peft_model.disable_adapter():
                    logp = model_forward_logprobs(
                        peft_model,
                        inputs,
                        self._keeps_logits,
                        unpadded=self._unpadded,
                        shared_prefix=self._shared_prefix,
                    )
                peft_model.train(was_training)
                return logp.detach()
            return model_forward_logprobs(
                self.ref_model,
                inputs,
                self._keeps_logits,
                unpadded=self._unpadded,
                shared_prefix=self._shared_prefix,
            ).detach()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logp = model_forward_logprobs(
            model, inputs, self._keeps_logits, unpadded=self._unpadded, shared_prefix=self._shared_prefix
        )
        ref_logp = inputs.get("ref_logp")
        if ref_logp is None and self.method != SFT:
            ref_logp = self._reference_logprobs(model, inputs)
        loss, stats = method_loss(
            self.method,
            logp,
            inputs,
            ref_logp,
            self.kl_coeff,
            self.clip_range,
            self.sft_coeff,
            detach_advantage=self.detach_advantage,
            reduction=self.reduction,
            step_rows=self._step_rows,
        )
        self._record(stats)
        return (loss, {"logp": logp.detach()}) if return_outputs else loss

    def _record(self, stats: dict) -> None:
        """Add a micro-batch's statistics to the sums, on the device: no host sync until they are logged.
        Summed in float64, the precision of the Python floats they were summed in before."""
        for key, value in stats.items():
            value = torch.as_tensor(value).detach().to(torch.float64)
            total = self._stat_sums.get(key)
            self._stat_sums[key] = value if total is None else total + value
            self._stat_counts[key] = self._stat_counts.get(key, 0) + 1

    def log(self, logs: dict, start_time: float | None = None) -> None:
        if "loss" in logs and self._stat_sums:
            keys = list(self._stat_sums)
            totals = torch.stack([self._stat_sums[key] for key in keys]).tolist()  # one sync per logging step
            for key, total in zip(keys, totals, strict=True):
                logs[key] = total / self._stat_counts[key]
            self._stat_sums, self._stat_counts = {}, {}
        super().log(logs, start_time)
