"""The memory plan's training step on one GPU (spag.models.memory): LoRA's trained parameters as peft counts
them, and the step's bytes by hand; and the decision it makes for a run of one process (spag.harness.zero)."""

from __future__ import annotations

import pytest

from spag.models.memory import (
    CUDA_OVERHEAD,
    ModelShape,
    gib,
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
    # the frozen weights in bfloat16 (spag train's LoRA under bf16), the adapters in float32 with Adam
    assert training_bytes(SHAPE, 2, 10, lora_rank=4) == CUDA_OVERHEAD + 1000 * 2 + 1088 * 16 + ACTIVATIONS


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

    from spag.models.memory import vllm_kv_tokens

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


# ------------------------------------------------------------- ZeRO only where it pays (spag.harness.zero)


def _qwen_folder(tmp_path):
    import json

    folder = tmp_path / "qwen2.5-1.5b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN25["1.5B"]))
    return folder


def test_one_process_on_a_gpu_that_holds_plain_training_leaves_deepspeed_out(tmp_path):
    from spag.config import TrainConfig
    from spag.harness.zero import zero_where_it_pays

    model = _qwen_folder(tmp_path)
    config = TrainConfig(deepspeed="configs/deepspeed_zero3.json", batch_size=4, max_length=2048)
    needed = training_bytes(model_shape(QWEN25["1.5B"]), 4, 2048)
    plain, note = zero_where_it_pays(config, "sft-kl", model, "cuda:0", 1, 80 * 2**30)
    assert plain.deepspeed is None and plain.batch_size == 4 and config.deepspeed  # a copy, the rest kept
    assert note.startswith("note: DeepSpeed (configs/deepspeed_zero3.json) left out at world size 1")
    assert f"{gib(needed)} planned of 80.0 GiB" in note
    # a device the plan does not fit within 90% of: ZeRO (its offloading) is what lets the model train
    kept, note = zero_where_it_pays(config, "sft-kl", model, "cuda", 1, int(needed / 0.9) - 1)
    assert kept is config and "kept at world size 1: plain training needs" in note
    assert zero_where_it_pays(config, "sft-kl", model, "cuda", 1, int(needed / 0.9) + 1)[0].deepspeed is None


def test_with_a_token_budget_the_plan_counts_a_micro_batchs_share_of_the_step_not_batch_size(tmp_path):
    """step_tokens: the plan that decides ZeRO counts a step's tokens over grad_accum plus one longest row,
    whatever batch_size says; 32k tokens a step in 4 micro-batches plan less than 16 rows of 2048 do."""
    from spag.config import TrainConfig
    from spag.harness.zero import planned_micro_batch, zero_where_it_pays

    model, shape = _qwen_folder(tmp_path), model_shape(QWEN25["1.5B"])
    budget = {"batch_rebalance": True, "step_tokens": 32768, "grad_accum": 4, "max_length": 2048}
    config = TrainConfig(deepspeed="configs/deepspeed_zero3.json", batch_size=16, **budget)
    assert planned_micro_batch(config) == (1, 8192 + 2048)
    assert planned_micro_batch(config.model_copy(update={"step_tokens": None})) == (16, 2048)
    needed = training_bytes(shape, 1, 10240)
    assert needed < training_bytes(shape, 16, 2048)
    plain, note = zero_where_it_pays(config, "sft-kl", model, "cuda", 1, int(needed / 0.9) + 1)
    assert plain.deepspeed is None and f"{gib(needed)} planned" in note
    assert zero_where_it_pays(config, "sft-kl", model, "cuda", 1, int(needed / 0.9) - 1)[0] is config


def test_zero_stays_with_more_processes_on_a_cpu_and_where_the_model_cannot_be_planned(tmp_path):
    from spag.config import TrainConfig
    from spag.harness.zero import zero_where_it_pays

    model = _qwen_folder(tmp_path)
    config = TrainConfig(deepspeed="configs/deepspeed_zero3.json")
    assert zero_where_it_pays(config, "sft-kl", model, "cuda:0", 2, 80 * 2**30) == (config, None)
    assert zero_where_it_pays(config, "sft-kl", model, "cpu", 1, None) == (config, None)
    assert zero_where_it_pays(TrainConfig(), "sft-kl", model, "cuda:0", 1, 80 * 2**30) == (
        TrainConfig(),
        None,
    )
    kept, note = zero_where_it_pays(config, "sft-kl", tmp_path / "no-model", "cuda:0", 1, 80 * 2**30)
    assert kept is config and "no config.json of" in note


def test_the_plan_that_decides_counts_a_reference_on_the_fly_and_lora():
    import json
    import tempfile
    from pathlib import Path

    from spag.config import TrainConfig
    from spag.harness.zero import zero_where_it_pays

    shape = model_shape(QWEN25["1.5B"])
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(QWEN25["1.5B"]))
        zero3 = {"deepspeed": "configs/deepspeed_zero3.json", "batch_size": 4, "max_length": 2048}
        alone = training_bytes(shape, 4, 2048)
        with_reference = training_bytes(shape, 4, 2048, reference_model=True)
        between = int((alone + with_reference) / 2 / 0.9)  # holds the policy alone, not a second model
        on_the_fly = TrainConfig(**zero3, ref_on_the_fly=True)
        assert zero_where_it_pays(on_the_fly, "offline-po", folder, "cuda", 1, between)[0].deepspeed
        assert zero_where_it_pays(on_the_fly, "sft-kl", folder, "cuda", 1, between)[0].deepspeed is None
        precomputed = TrainConfig(**zero3, ref_on_the_fly=False)
        assert zero_where_it_pays(precomputed, "offline-po", folder, "cuda", 1, between)[0].deepspeed is None
        lora = TrainConfig(**zero3, ref_on_the_fly=True, lora_r=16)  # the reference is the adapters off
        small = int(training_bytes(shape, 4, 2048, lora_rank=16) / 0.9) + 1
        assert zero_where_it_pays(lora, "offline-po", folder, "cuda", 1, small)[0].deepspeed is None
