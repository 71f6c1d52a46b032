"""ZeRO only where it pays: a DeepSpeed config is left out of a run of one process on a GPU that holds plain
training. The harness decides it before the core's run (:func:`spag.harness.training.train`, which every
command, stage and launched job calls); the core trains with the config it is given.

ZeRO shards a model's weights, gradients and optimiser state over processes. With one process there is nothing
to shard over, and its gathers, partitioning and (in the paper's configs) offloading cost time for nothing: on an
H200, a ZeRO-3 step of one process took 3.9 times the plain step (docs/gpu.md, 2026-11-27). So a run whose world
size is 1, on a CUDA device, trains without DeepSpeed when spag's memory plan
(:func:`spag.models.memory.training_bytes` of the micro-batch :func:`planned_micro_batch` counts) fits
within :data:`SHARE` of the device's memory. It keeps its DeepSpeed config where there is more than one
process, on a CPU (DeepSpeed there is a rehearsal of the paper's setting), where the plan does not fit (ZeRO's
offloading is what lets such a model train), and where the model's config cannot be read to plan it.

The plain run differs in precision: the policy's weights stay in float32 under bfloat16 autocast, where
DeepSpeed's bfloat16 mode keeps 16-bit weights beside float32 master weights, and a reference on the fly runs in
float32 under the same autocast instead of in the engine's bfloat16.
"""

from __future__ import annotations

import math
import os

from spag.config import TrainConfig
from spag.models.memory import gib, model_shape, read_config, training_bytes

SHARE = 0.9  # of the device's memory the plan may take: the rest for fragmentation and the allocator's slack


def zero_where_it_pays(
    config: TrainConfig, method: str, model, device: str, world_size: int, device_bytes: int | None
) -> tuple[TrainConfig, str | None]:
    """The config to train with (``deepspeed`` dropped where ZeRO does not pay) and a note saying what was
    decided and why (None when there was nothing to decide: no DeepSpeed config, or more than one process)."""
    if not config.deepspeed or world_size > 1:
        return config, None
    if not device.startswith("cuda"):
        return config, None
    found = read_config(model)
    if found is None or not device_bytes:
        return config, f"note: DeepSpeed kept at world size 1: no config.json of {model} to plan its memory"
    lora = config.lora_r or 0
    planned = training_bytes(
        model_shape(found),
        *planned_micro_batch(config),
        lora_rank=lora,
        reference_model=method == "offline-po" and config.ref_on_the_fly and not lora,
    )
    sizes = f"{gib(planned)} planned of {gib(device_bytes)}"
    if planned > SHARE * device_bytes:
        return (
            config,
            f"note: DeepSpeed ({config.deepspeed}) kept at world size 1: plain training needs {sizes}",
        )
    return config.model_copy(update={"deepspeed": None}), (
        f"note: DeepSpeed ({config.deepspeed}) left out at world size 1: one process has nothing to shard, "
        f"and plain training fits ({sizes})"
    )


def planned_micro_batch(config: TrainConfig) -> tuple[int, int]:
    """Rows and tokens a row of the largest micro-batch of one process the memory plan counts: ``batch_size``
    rows of ``max_length`` tokens (the longest a row can be), or with ``step_tokens`` a step's tokens over its
    ``grad_accum`` micro-batches plus one row of ``max_length`` (a step holds its share give or take a row),
    as one row: the plan's activations grow with a micro-batch's tokens, however they are cut into rows."""
    if config.batch_rebalance and config.step_tokens:
        return 1, math.ceil(config.step_tokens / config.grad_accum) + config.max_length
    return config.batch_size, config.max_length


def world_size() -> int:
    """Processes of this run, as the launcher set them (1 when not launched)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def first_process() -> bool:
    """Whether this is the first (or only) process of the run, as the launcher numbered them."""
    return int(os.environ.get("RANK", "0")) == 0


def cuda_bytes(device: str) -> int | None:
    """The memory of a CUDA device (None for any other)."""
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_properties(torch.device(device)).total_memory
