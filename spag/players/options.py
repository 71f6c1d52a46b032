"""The options of each player backend: one typed section per backend, where each option and its default is
defined once.

:func:`spag.players.load_player` checks a call's options against its backend's section; the sampling
sections of a params file (:class:`spag.config.Sampling`: ``teacher``, ``play``, ``evaluate``) are made of
these sections, and so are the options of the commands that play (:mod:`spag.commands.options`) and the
params each stage tracks (:mod:`spag.pipeline.table`). A new option is one knob here, and its test
(docs/design-notes.md shows one).
"""

from __future__ import annotations

from typing import Literal

from spag.schema import DEVICE_PATTERN, HttpUrl, Section, knob

DTYPES = ("auto", "float32", "bfloat16", "float16")
OPENAI_APIS = ("chat", "completions")


# How the hf backend samples each row (spag.players.hf.sampling): "auto" picks one by the device.
SAMPLERS = ("auto", "per-row", "counter")
# What decodes the hf backend's replies: spag's engine (spag.players.hf.player) or transformers' generate
# with a static cache (spag.players.hf.generate).
DECODERS = ("engine", "generate")


class LocalModelOptions(Section):
    """What the backends that run a model in this process share (hf, vllm)."""

    dtype: Literal[DTYPES] = knob(
        "auto",
        "hf/vllm weights: auto (bfloat16 on a GPU that has it, else float32), float32, bfloat16, float16.",
    )
    max_prompt_tokens: int | None = knob(
        None,
        "hf/vllm: keep the last N tokens of a longer prompt (the original "
        "cut at 2048); null: the whole prompt.",
        ge=1,
    )


class HFOptions(LocalModelOptions):
    """The hf backend: transformers, batched by spag's own engine (:mod:`spag.players.hf`)."""

    device: str | None = knob(
        None, "hf backend: cpu, cuda, cuda:1 ... (null: the best there is).", pattern=DEVICE_PATTERN
    )
    max_batch: int | None = knob(
        None, "hf backend: replies decoded together (null: every prompt of a call).", ge=1
    )
    prefill_tokens: int = knob(4096, "hf backend: prompt tokens encoded in one forward pass.", ge=1)
    sampler: Literal[SAMPLERS] = knob(
        "auto",
        "hf backend: how rows are sampled, each with its own seed: per-row (a generator per row), counter "
        "(every row in one call, noise hashed from the seed, the step and the token: no host sync) or auto "
        "(counter on a GPU, per-row on a CPU). The two draw different episodes from the same seed.",
    )
    prefix_cache_gb: float = knob(
        2.0, "hf backend: memory kept for prompt keys/values reused between calls (0: none kept).", ge=0
    )
    decoder: Literal[DECODERS] = knob(
        "engine",
        "hf backend: engine (spag's batched decoder, prompts' keys/values reused between calls) or generate "
        "(transformers' model.generate with a static cache, its decode step compiled into a CUDA graph on a "
        "GPU; the counter sampler's draws, so not with sampler: per-row).",
    )


class VLLMOptions(LocalModelOptions):
    """The vllm backend: a vLLM engine, on a GPU or vLLM's CPU build (:mod:`spag.players.vllm`)."""

    gpu_memory_utilization: float = knob(
        0.3,
        "vllm backend: share of the memory one engine takes (weights, "
        "activations, KV cache): of the GPU, or on vLLM's CPU build of the "
        "CPU's NUMA node; two models in one game are two engines.",
        gt=0,
        le=1,
    )
    tensor_parallel_size: int = knob(
        1,
        "vllm backend: GPUs one engine spans (under a launcher, each rank takes "
        "this many of the visible GPUs).",
        ge=1,
    )
    enforce_eager: bool | None = knob(
        None,
        "vllm backend: run without compiled graphs (null: eager on the CPU "
        "build, which then starts in seconds; CUDA graphs on a GPU).",
    )


class OpenAIOptions(Section):
    """The openai backend: any OpenAI-compatible endpoint (:mod:`spag.players.openai`)."""

    base_url: HttpUrl | None = knob(
        None, "openai backend: an OpenAI-compatible endpoint URL (null: OpenAI's)."
    )
    api_key_env: str | None = knob(
        None,
        "openai backend: environment variable holding the API key for base_url "
        "(null: OPENAI_API_KEY, sent to api.openai.com only).",
    )
    concurrency: int = knob(8, "openai backend: parallel requests.", ge=1)
    timeout: float = knob(60.0, "openai backend: seconds one request may take.", gt=0)
    max_retries: int = knob(4, "openai backend: retries of a failed request.", ge=0)
    api: Literal[OPENAI_APIS] = knob(
        "chat", "openai backend: chat (/v1/chat/completions) or completions (/v1/completions)."
    )
    extensions: bool | None = knob(
        None,
        "openai backend: send top_k and min_tokens, which vLLM and most "
        "compatible servers accept (null: on for any base_url, off for OpenAI).",
    )


# Each backend a params file may name, and its options (the human backend, a person at the terminal, takes none).
BACKEND_OPTIONS: dict[str, type[Section]] = {"hf": HFOptions, "vllm": VLLMOptions, "openai": OpenAIOptions}
