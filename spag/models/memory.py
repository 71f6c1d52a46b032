"""GPU memory of the work spag does, estimated from a model's config before anything is loaded.

Used by :mod:`spag.pipeline.preflight` (does a stage's model fit its GPU at all?), by the hf backend's batch planning
(:meth:`spag.players.hf.HFPlayer.generate` splits a batch whose key/value buffers would not fit), and for the
table of what fits on 40 GB and 80 GB GPUs in ``docs/gpu.md`` (``python -m spag.models.memory MODEL_DIR``).

Every figure is arithmetic on the config, stated so it can be checked by hand:

- weights: parameters × bytes per parameter of the dtype (counted from the config for Llama's layout, else on
  torch's meta device: any architecture transformers knows, nothing allocated);
- key/value cache: 2 (key, value) × layers × key/value heads × head size × bytes, per token;
- ZeRO-3 training, per GPU with N processes: the 16-bit weights' share (1/N, or none with the parameters
  offloaded to the CPU), the largest layer gathered whole, the checkpointed activations (one hidden state per
  layer and token) and the logits of a micro-batch in float32 (with their log-softmax: 3 copies).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# What a CUDA context, cuBLAS/cuDNN workspaces and the allocator's fragmentation take before any tensor:
# about 1 GiB on an 80 GB H100 under torch 2.x; counted once per process.
CUDA_OVERHEAD = 1 * GIB


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a causal LM that memory depends on."""

    parameters: int
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int

    def weight_bytes(self, dtype: str) -> int:
        return self.parameters * DTYPE_BYTES[dtype]

    def kv_bytes_per_token(self, dtype: str) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES[dtype]


def read_config(model: str | os.PathLike) -> dict | None:
    """A model's ``config.json``: from its directory, or from the hub cache for an id (nothing downloaded);
    None when neither has it."""
    path = Path(str(model)).expanduser()
    if path.is_dir():
        config = path / "config.json"
        return json.loads(config.read_text(encoding="utf-8")) if config.is_file() else None
    if str(model).count("/") != 1:
        return None
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(str(model), "config.json")
    except HFValidationError:  # not a repository id
        return None
    return json.loads(Path(cached).read_text(encoding="utf-8")) if isinstance(cached, str) else None


# Architectures whose parameters are counted from the config by the formula below (Llama's layout: q, k, v,
# o projections, a gated MLP, two norms per layer); any other is built on the meta device and counted.
LLAMA_LIKE = ("llama", "mistral")


def model_shape(config: dict) -> ModelShape:
    """The shape of the model ``config`` describes."""
    text = config.get("text_config") or config
    heads = text["num_attention_heads"]
    hidden = text["hidden_size"]
    shape = ModelShape(parameters=0, layers=text["num_hidden_layers"], hidden=hidden,
                       intermediate=text.get("intermediate_size") or 4 * hidden,
                       kv_heads=text.get("num_key_value_heads") or heads,
                       head_dim=text.get("head_dim") or hidden // heads, vocab=text["vocab_size"])
    if config.get("model_type") in LLAMA_LIKE:
        return _with_parameters(shape, _llama_parameters(shape, heads, config))
    return _with_parameters(shape, _meta_parameters(config))


def _with_parameters(shape: ModelShape, parameters: int) -> ModelShape:
    return replace(shape, parameters=parameters)


def _llama_parameters(shape: ModelShape, heads: int, config: dict) -> int:
    """Embeddings (and an untied output layer); per layer the attention's q, k, v, o projections (biases when
    ``attention_bias``), the gated MLP's three (``mlp_bias``) and two norms; the final norm."""
    h, q, kv = shape.hidden, heads * shape.head_dim, shape.kv_heads * shape.head_dim
    attention = h * q + 2 * h * kv + q * h + (q + 2 * kv + h if config.get("attention_bias") else 0)
    mlp = 3 * h * shape.intermediate + (2 * shape.intermediate + h if config.get("mlp_bias") else 0)
    embeddings = shape.vocab * h * (1 if config.get("tie_word_embeddings", False) else 2)
    return embeddings + shape.layers * (attention + mlp + 2 * h) + h


def _meta_parameters(config: dict) -> int:
    """Parameters of the model built on torch's meta device (nothing allocated; tied weights counted once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **settings))
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------------ estimates


def play_bytes(shape: ModelShape, dtype: str, models: int, rows: int, tokens: int, cache_gib: float = 2.0) -> int:
    """The hf backend on one GPU: ``models`` copies of the weights, each with its kept prompt cache
    (``cache_gib``), and the key/value buffers of ``rows`` games of ``tokens`` each (prompt + reply), with the
    first logits of every row in float32."""
    per_row = shape.kv_bytes_per_token(dtype) * tokens + 4 * shape.vocab
    return CUDA_OVERHEAD + models * (shape.weight_bytes(dtype) + int(cache_gib * GIB)) + rows * per_row


def rows_that_fit(shape: ModelShape, dtype: str, models: int, tokens: int, gpu_bytes: int,
                  cache_gib: float = 2.0) -> int:
    """How many games of ``tokens`` the hf backend decodes together on a GPU of ``gpu_bytes`` (0: not one)."""
    fixed = play_bytes(shape, dtype, models, 0, tokens, cache_gib)
    per_row = play_bytes(shape, dtype, models, 1, tokens, cache_gib) - fixed
    return max(0, (gpu_bytes - fixed) // per_row)


def vllm_kv_tokens(shape: ModelShape, dtype: str, gpu_bytes: int, utilization: float, tensor_parallel: int = 1) -> int:
    """Tokens of key/value cache one vLLM engine has: its share of each GPU, less its share of the weights
    (activations and CUDA graphs left out: vLLM profiles them, a few GiB)."""
    share = utilization * gpu_bytes * tensor_parallel - shape.weight_bytes(dtype) - CUDA_OVERHEAD * tensor_parallel
    return max(0, int(share // shape.kv_bytes_per_token(dtype)))


def zero3_bytes(shape: ModelShape, processes: int, micro_batch: int, tokens: int, offload_params: bool,
                reference: bool, live_parameters: int = 10**9) -> int:
    """One GPU's memory in a ZeRO-3 bfloat16 training step of ``processes`` processes (see the module
    docstring): weights (the policy's, and the in-engine reference's when ``reference``) kept as 1/N shards
    unless offloaded; the parameters gathered whole at once, at most ``live_parameters``
    (``stage3_max_live_parameters`` of configs/deepspeed_zero3.json); checkpointed activations, one layer's
    full activations during its recomputation, and float32 logits with their log-softmax."""
    copies = 2 if reference else 1
    shards = 0 if offload_params else copies * shape.weight_bytes("bfloat16") // processes
    gathered = min(copies * shape.parameters, live_parameters) * 2
    rows = micro_batch * tokens
    checkpoints = shape.layers * rows * shape.hidden * 2
    recompute = rows * (10 * shape.hidden + 3 * shape.intermediate) * 2
    logits = 3 * rows * shape.vocab * 4
    return CUDA_OVERHEAD + shards + gathered + checkpoints + recompute + logits


def offload_host_bytes(shape: ModelShape, reference: bool) -> int:
    """Host memory a ZeRO-3 run with optimiser and parameters offloaded holds for the whole machine: float32
    master weights and Adam's two moments (12 bytes a parameter) and the 16-bit parameters (the policy's, and
    the in-engine reference's)."""
    return shape.parameters * (12 + 2 * (2 if reference else 1))


GPUS = {"40 GB (A100-40G)": 40960 * 2**20, "80 GB (A100-80G, H100)": 81920 * 2**20}  # nvidia-smi's totals


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def table(shape: ModelShape, dtype: str = "float16", tokens: int = 2304, micro_batch: int = 2,
          max_length: int = 2048, processes: int = 8) -> str:
    """The table of docs/gpu.md: what fits on one GPU of each size for configs/paper.yaml's settings."""
    head = "| | " + " | ".join(GPUS) + " |\n|---|" + "---|" * len(GPUS) + "\n"
    rows = [
        (f"weights, {dtype}", lambda g: gib(shape.weight_bytes(dtype))),
        ("play, vLLM at `gpu_memory_utilization` 0.85: key/value cache",
         lambda g: f"{vllm_kv_tokens(shape, dtype, g, 0.85):,} tokens ({vllm_kv_tokens(shape, dtype, g, 0.85) // tokens}"
                   f" games of {tokens})"),
        (f"play, hf backend, one model: games of {tokens} tokens at once",
         lambda g: str(rows_that_fit(shape, dtype, 1, tokens, g))),
        (f"evaluate, hf backend, two models: games of {tokens} tokens at once (preset: 32)",
         lambda g: str(rows_that_fit(shape, dtype, 2, tokens, g))),
        ("evaluate, vLLM, two engines at 0.3: key/value cache per engine",
         lambda g: f"{vllm_kv_tokens(shape, dtype, g, 0.3):,} tokens"),
        (f"training step, ZeRO-3, {processes} processes, {micro_batch} × {max_length} tokens, reference in the "
         "engine, parameters offloaded (preset)",
         lambda g: gib(zero3_bytes(shape, processes, micro_batch, max_length, True, True))),
        ("the same, parameters on the GPUs",
         lambda g: gib(zero3_bytes(shape, processes, micro_batch, max_length, False, True))),
    ]
    body = "".join(f"| {label} | " + " | ".join(cell(g) for g in GPUS.values()) + " |\n" for label, cell in rows)
    host = gib(offload_host_bytes(shape, reference=True))
    return head + body + f"| host memory for the offloaded optimiser and parameters (per machine) | {host} | {host} |\n"


def main(argv: list[str]) -> None:
    """Print the table of docs/gpu.md for the model directory (or cached hub id) ``argv[0]``."""
    (model,) = argv
    config = read_config(model)
    if config is None:
        raise SystemExit(f"{model}: no config.json here or in the hub cache")
    shape = model_shape(config)
    print(f"{shape.parameters:,} parameters; key/value cache {shape.kv_bytes_per_token('float16') // 2**10} KiB per "
          "token in float16\n")
    print(table(shape), end="")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
