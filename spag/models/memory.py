"""GPU memory of the work spag does, estimated from a model's config before anything is loaded.

Used by :mod:`spag.pipeline.preflight` (does a stage's model fit its GPU at all?), by the hf backend's batch planning
(:meth:`spag.players.hf.HFPlayer.generate` splits a batch whose key/value buffers would not fit), and for the
table of what fits on 40 GB and 80 GB GPUs in ``docs/gpu.md`` (``python -m spag.models.memory MODEL_DIR``).

Every figure is arithmetic on the config, stated so it can be checked by hand:

- weights: parameters × bytes per parameter of the dtype (counted from the config for Llama's layout, else on
  torch's meta device: any architecture transformers knows, nothing allocated);
- key/value cache: 2 (key, value) × layers × key/value heads × head size × bytes, per token;
- ZeRO-3 training, per GPU with N processes: the 16-bit weights' share (1/N, or none with the parameters
  offloaded to the CPU), the optimiser's share unless offloaded (float32 master weights, Adam's two moments and
  16-bit gradients: 14 bytes a trained parameter, 1/N), the largest layer gathered whole, the checkpointed
  activations (one hidden state per layer and token) and the logits of a micro-batch in float32 (with their
  log-softmax: 3 copies);
- training in one process on one GPU without DeepSpeed (:func:`training_bytes`), as ``spag train`` loads the
  policy: float32 weights (bfloat16 autocast), float32 gradients and Adam's two moments of what is trained
  (every weight, or LoRA's adapters: :func:`lora_parameters`), a reference model beside it when it runs on
  the fly without LoRA, and the activations and logits as above.
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
    heads: int = 0  # attention (query) heads; 0: hidden // head_dim

    @property
    def query_width(self) -> int:
        return (self.heads or self.hidden // self.head_dim) * self.head_dim

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
    shape = ModelShape(
        parameters=0,
        layers=text["num_hidden_layers"],
        hidden=hidden,
        intermediate=text.get("intermediate_size") or 4 * hidden,
        kv_heads=text.get("num_key_value_heads") or heads,
        head_dim=text.get("head_dim") or hidden // heads,
        vocab=text["vocab_size"],
        heads=heads,
    )
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


def play_bytes(
    shape: ModelShape, dtype: str, models: int, rows: int, tokens: int, cache_gib: float = 2.0
) -> int:
    """The hf backend on one GPU: ``models`` copies of the weights, each with its kept prompt cache
    (``cache_gib``), and the key/value buffers of ``rows`` games of ``tokens`` each (prompt + reply), with the
    first logits of every row in float32."""
    per_row = shape.kv_bytes_per_token(dtype) * tokens + 4 * shape.vocab
    return CUDA_OVERHEAD + models * (shape.weight_bytes(dtype) + int(cache_gib * GIB)) + rows * per_row


def rows_that_fit(
    shape: ModelShape, dtype: str, models: int, tokens: int, gpu_bytes: int, cache_gib: float = 2.0
) -> int:
    """How many games of ``tokens`` the hf backend decodes together on a GPU of ``gpu_bytes`` (0: not one)."""
    fixed = play_bytes(shape, dtype, models, 0, tokens, cache_gib)
    per_row = play_bytes(shape, dtype, models, 1, tokens, cache_gib) - fixed
    return max(0, (gpu_bytes - fixed) // per_row)


def vllm_kv_tokens(
    shape: ModelShape, dtype: str, gpu_bytes: int, utilization: float, tensor_parallel: int = 1
) -> int:
    """Tokens of key/value cache one vLLM engine has: its share of each GPU, less its share of the weights
    (activations and CUDA graphs left out: vLLM profiles them, a few GiB)."""
    share = (
        utilization * gpu_bytes * tensor_parallel
        - shape.weight_bytes(dtype)
        - CUDA_OVERHEAD * tensor_parallel
    )
    return max(0, int(share // shape.kv_bytes_per_token(dtype)))


def zero3_bytes(
    shape: ModelShape,
    processes: int,
    micro_batch: int,
    tokens: int,
    offload_params: bool,
    reference: bool,
    live_parameters: int = 10**9,
    offload_optimizer: bool = True,
) -> int:
    """One GPU's memory in a ZeRO-3 bfloat16 training step of ``processes`` processes (see the module
    docstring): weights (the policy's, and the in-engine reference's when ``reference``) kept as 1/N shards
    unless offloaded; the optimiser's 1/N share unless ``offload_optimizer`` (float32 master weights, Adam's two
    moments, 16-bit gradients: 14 bytes a parameter of the policy; the frozen reference has none); the
    parameters gathered whole at once, at most ``live_parameters`` (``stage3_max_live_parameters`` of
    configs/deepspeed_zero3.json); checkpointed activations, one layer's full activations during its
    recomputation, and float32 logits with their log-softmax."""
    copies = 2 if reference else 1
    shards = 0 if offload_params else copies * shape.weight_bytes("bfloat16") // processes
    optimiser = 0 if offload_optimizer else 14 * shape.parameters // processes
    gathered = min(copies * shape.parameters, live_parameters) * 2
    return CUDA_OVERHEAD + shards + optimiser + gathered + _activation_bytes(shape, micro_batch, tokens, 2)


def _activation_bytes(shape: ModelShape, micro_batch: int, tokens: int, hidden_bytes: int) -> int:
    """A micro-batch's activations under gradient checkpointing: one hidden state per layer and token (of
    ``hidden_bytes`` each), one layer's full activations in 16 bits while it is recomputed, and the float32
    logits with their log-softmax."""
    rows = micro_batch * tokens
    checkpoints = shape.layers * rows * shape.hidden * hidden_bytes
    recompute = rows * (10 * shape.hidden + 3 * shape.intermediate) * 2
    logits = 3 * rows * shape.vocab * 4
    return checkpoints + recompute + logits


def lora_parameters(shape: ModelShape, rank: int) -> int:
    """LoRA's trained parameters with ``lora_target_modules: all-linear`` (peft's: every linear layer of the
    decoder, the output layer left out): rank × (inputs + outputs) for each of q, k, v, o and the gated MLP's
    three projections, in every layer."""
    h, q, kv, i = shape.hidden, shape.query_width, shape.kv_heads * shape.head_dim, shape.intermediate
    per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
    return rank * per_layer * shape.layers


def training_bytes(
    shape: ModelShape, micro_batch: int, tokens: int, *, lora_rank: int = 0, reference_model: bool = False
) -> int:
    """One GPU's memory in a training step of ``spag train`` without DeepSpeed (one process, bfloat16 autocast,
    gradient checkpointing): the policy's float32 weights and float32 gradients and Adam's two moments of every
    weight (12 bytes each), or with LoRA (``lora_rank``) the frozen weights in bfloat16 (as ``spag train``
    loads them under bf16) and the adapters' float32 weights, gradients and moments (16 bytes each); a float32
    reference model when ``reference_model`` (on the fly without LoRA: with LoRA the reference is the same
    weights with the adapters off); and the activations of :func:`zero3_bytes`, the hidden states in float32.
    autocast's bfloat16 copies of the trained weights live during the forward pass only, before the gradients
    exist, so the backward pass is the peak."""
    weights = shape.weight_bytes("bfloat16" if lora_rank else "float32")
    trained = 16 * lora_parameters(shape, lora_rank) if lora_rank else 12 * shape.parameters
    reference = shape.weight_bytes("float32") if reference_model else 0
    return CUDA_OVERHEAD + weights + trained + reference + _activation_bytes(shape, micro_batch, tokens, 4)


def offload_host_bytes(shape: ModelShape, reference: bool) -> int:
    """Host memory a ZeRO-3 run with optimiser and parameters offloaded holds for the whole machine: float32
    master weights and Adam's two moments (12 bytes a parameter) and the 16-bit parameters (the policy's, and
    the in-engine reference's)."""
    return shape.parameters * (12 + 2 * (2 if reference else 1))


GPUS = {"40 GB (A100-40G)": 40960 * 2**20, "80 GB (A100-80G, H100)": 81920 * 2**20}  # nvidia-smi's totals


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def table(
    shape: ModelShape,
    dtype: str = "float16",
    tokens: int = 2304,
    micro_batch: int = 2,
    max_length: int = 2048,
    processes: int = 8,
) -> str:
    """The table of docs/gpu.md: what fits on one GPU of each size for configs/paper.yaml's settings."""
    head = "| | " + " | ".join(GPUS) + " |\n|---|" + "---|" * len(GPUS) + "\n"
    rows = [
        (f"weights, {dtype}", lambda g: gib(shape.weight_bytes(dtype))),
        (
            "play, vLLM at `gpu_memory_utilization` 0.85: key/value cache",
            lambda g: (
                f"{vllm_kv_tokens(shape, dtype, g, 0.85):,} tokens ({vllm_kv_tokens(shape, dtype, g, 0.85) // tokens}"
                f" games of {tokens})"
            ),
        ),
        (
            f"play, hf backend, one model: games of {tokens} tokens at once",
            lambda g: str(rows_that_fit(shape, dtype, 1, tokens, g)),
        ),
        (
            f"evaluate, hf backend, two models: games of {tokens} tokens at once (preset: 32)",
            lambda g: str(rows_that_fit(shape, dtype, 2, tokens, g)),
        ),
        (
            "evaluate, vLLM, two engines at 0.3: key/value cache per engine",
            lambda g: f"{vllm_kv_tokens(shape, dtype, g, 0.3):,} tokens",
        ),
        (
            f"training step, ZeRO-3, {processes} processes, {micro_batch} × {max_length} tokens, reference in the "
            "engine, parameters offloaded (preset)",
            lambda g: gib(zero3_bytes(shape, processes, micro_batch, max_length, True, True)),
        ),
        (
            "the same, parameters on the GPUs",
            lambda g: gib(zero3_bytes(shape, processes, micro_batch, max_length, False, True)),
        ),
    ]
    body = "".join(
        f"| {label} | " + " | ".join(cell(g) for g in GPUS.values()) + " |\n" for label, cell in rows
    )
    host = gib(offload_host_bytes(shape, reference=True))
    return (
        head
        + body
        + f"| host memory for the offloaded optimiser and parameters (per machine) | {host} | {host} |\n"
    )


def main(argv: list[str]) -> None:
    """Print the table of docs/gpu.md for the model directory (or cached hub id) ``argv[0]``."""
    (model,) = argv
    config = read_config(model)
    if config is None:
        raise SystemExit(f"{model}: no config.json here or in the hub cache")
    shape = model_shape(config)
    print(
        f"{shape.parameters:,} parameters; key/value cache {shape.kv_bytes_per_token('float16') // 2**10} KiB per "
        "token in float16\n"
    )
    print(table(shape), end="")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
