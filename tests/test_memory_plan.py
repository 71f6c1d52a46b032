"""The memory plan's training step on one GPU (spag.models.memory): LoRA's trained parameters as peft counts
them, and the step's bytes by hand."""

from __future__ import annotations

import pytest

from spag.models.memory import (
    CUDA_OVERHEAD,
    ModelShape,
    lora_parameters,
    model_shape,
    training_bytes,
    zero3_bytes,
)

# Query width (4 heads of 32) wider than the hidden size, grouped key/values, biases (Qwen2), untied embeddings.
TINY = {
    "llama": {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 300,
        "tie_word_embeddings": False,
    },
    "qwen2": {
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "vocab_size": 300,
        "tie_word_embeddings": True,
    },
}


@pytest.mark.parametrize("family", TINY)
def test_lora_parameters_are_what_peft_trains(family):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = TINY[family]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_parameters(model_shape(config), 4) == trained


SHAPE = ModelShape(
    parameters=1000, layers=2, hidden=8, intermediate=16, kv_heads=2, head_dim=4, vocab=32, heads=2
)
# 2 rows of 10 tokens: hidden states 2 layers x 20 x 8 x 4 bytes, one layer recomputed 20 x (80 + 48) x 2 bytes,
# float32 logits and their log-softmax 3 x 20 x 32 x 4 bytes
ACTIVATIONS = 2 * 20 * 8 * 4 + 20 * (10 * 8 + 3 * 16) * 2 + 3 * 20 * 32 * 4


def test_a_full_training_step_holds_float32_weights_gradients_and_adam():
    assert training_bytes(SHAPE, 2, 10) == CUDA_OVERHEAD + 1000 * (4 + 4 + 8) + ACTIVATIONS
    # a reference model beside it (on the fly, no LoRA): float32 weights once more
    assert training_bytes(SHAPE, 2, 10, reference_model=True) == training_bytes(SHAPE, 2, 10) + 4000


def test_a_lora_step_trains_the_adapters_alone():
    # q 8->8, k and v 8->8, o 8->8, gate and up 8->16, down 16->8: rank x (in + out) each, in 2 layers
    assert lora_parameters(SHAPE, 4) == 4 * (16 + 2 * 16 + 16 + 2 * 24 + 24) * 2 == 1088
    assert training_bytes(SHAPE, 2, 10, lora_rank=4) == CUDA_OVERHEAD + 1000 * 4 + 1088 * 16 + ACTIVATIONS


def test_zero3_without_offload_keeps_the_optimiser_share_on_each_gpu():
    offloaded = zero3_bytes(SHAPE, 2, 2, 10, offload_params=False, reference=True)
    on_gpu = zero3_bytes(SHAPE, 2, 2, 10, offload_params=False, reference=True, offload_optimizer=False)
    assert on_gpu - offloaded == 14 * 1000 // 2


# Qwen2.5-0.5B- and 1.5B-Instruct's config.json as the hub has them (the shape is all the plan reads).
QWEN25 = {
    "0.5B": {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "1.5B": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
}


def test_the_one_gpu_table_of_docs_gpu_md_is_the_plan():
    """docs/gpu.md's "One GPU" table: configs/one-gpu.yaml's LoRA step and vLLM's cache, as the plan gives them."""
    from pathlib import Path

    from spag.models.memory import gib, vllm_kv_tokens

    shapes = [model_shape(QWEN25[size]) for size in ("0.5B", "1.5B")]
    assert [s.parameters for s in shapes] == [494_032_768, 1_543_714_304]  # the published counts
    gpus = [24564 * 2**20, 49140 * 2**20, 81559 * 2**20]  # nvidia-smi's totals: RTX 4090, L40S, H100
    rows = [
        (
            "training step, LoRA r16, 4 × 2048 tokens (preset)",
            lambda s: gib(training_bytes(s, 4, 2048, lora_rank=16)),
        ),
        ("the same, 2 × 2048 tokens", lambda s: gib(training_bytes(s, 2, 2048, lora_rank=16))),
        (
            "training step without LoRA (`lora_r: 0`), 4 × 2048 tokens, float32 reference on the fly",
            lambda s: gib(training_bytes(s, 4, 2048, reference_model=True)),
        ),
        (
            "vLLM at 0.85: key/value cache on 24 / 48 / 80 GB, in games of 2304 tokens",
            lambda s: " / ".join(str(vllm_kv_tokens(s, "bfloat16", g, 0.85) // 2304) for g in gpus),
        ),
    ]
    doc = (Path(__file__).resolve().parent.parent / "docs" / "gpu.md").read_text()
    for label, cell in rows:
        assert f"| {label} | {cell(shapes[0])} | {cell(shapes[1])} |" in doc, label
