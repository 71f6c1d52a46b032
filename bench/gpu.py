"""The GPU check: does spag's path run on this GPU, how fast, and in how much memory, within 8 minutes.

    python bench/gpu.py [--out gpu-check.json] [--parts device,ceilings,...] [--timeout SECONDS|PART=SECONDS,...]
                        [--budget SECONDS]
    python bench/gpu.py --cpu [--spawn]  # every part at toy size on the CPU: checks that the check runs (CI's slow
                                         # tier); each part in a fork of the check (--spawn: a new process each)

It runs from the source tree (nothing to install but what the parts import: torch, transformers, accelerate,
peft, and for their parts DeepSpeed and TRL) and reaches no network: the models are built from configs with
random weights directly on the GPU (:mod:`shapes`), the tokenizer is the embedded model's, carried in
``bench/tokenizer/``, and the hub is set offline. Each part runs in a child process of its own with its own time
limit; a part that fails, crashes or hangs is recorded as such, with the last lines it printed, and the next
part runs, while the check's budget lasts (``--budget``, 8 minutes on a GPU: the parts left when it is spent
are recorded as skipped). The JSON (``--out``) is rewritten, atomically, after every part, so a run cut short
keeps what ran.

The parts, in the order they run (shapes: ``embedded`` is SmolLM2-135M's config, ``qwen2.5-1.5b``
Qwen2.5-1.5B-Instruct's published config, its 151,936-token vocabulary included, ``llama-7b`` a 6.88B
Llama-2; ``--cpu``: two layers of 64 of each family, at a sixteenth or a quarter of the batches):

device            the GPU, driver, torch and CUDA as torch and nvidia-smi see them; the peaks used below
ceilings          what the device reaches at best: an 8192-square bfloat16 matrix product (TFLOP/s) and a 2 GiB
                  copy (TB/s read and written), beside the data sheet's peaks
decode-step       one decode step at 1.5B with 64 rows and ~300-word prompts, four ways on one model: spag's
                  hf engine (the counter sampler), spag's ``decoder: generate``, ``model.generate`` (dynamic
                  cache) and ``model.generate`` with a static cache, which transformers compiles on a GPU
                  (torch.compile "reduce-overhead": the step is a CUDA graph); ms per step and bandwidth
play-b32, -b128, -b512
                  self-play at 1.5B in bfloat16 with 32, 128 and 512 games at once (one round, replies up to 32
                  tokens): the hf engine (the counter sampler), padded ``model.generate`` and ``decoder:
                  generate`` (its compiling counted) on the same words and prompts (bench/play.py's sides):
                  episodes/s, tokens/s, bandwidth, engine over generate; a part cut short keeps its sides
sft-kl-8x2048, sft-kl-16x2048
                  ``sft-kl`` without DeepSpeed at 1.5B, 8 or 16 rows of 2048 tokens a step (one micro-batch),
                  the reference's log-probs computed first
offline-po-8x2048, offline-po-16x2048
                  ``offline-po`` without DeepSpeed at 1.5B, the reference on the fly beside the policy
offline-po-zero3-8x2048
                  the same under ZeRO-3 on one GPU, configs/deepspeed_zero3_gpu.json (nothing offloaded), the
                  reference in the engine: what ZeRO-3 costs at world size 1
lora-llama-7b-8x2048
                  ``offline-po`` with LoRA (rank 16, all linear layers, the base in bfloat16) on the 7B, the
                  reference being the same weights with the adapters off
sft-kl-rows-32    ``sft-kl`` at 1.5B on 32 game rows of their own lengths a step (a few hundred tokens each),
                  padded, then ``padding_free``, then ``padding_free`` with ``batch_rebalance`` (4 micro-batches
                  of balanced cost a step): tokens/s and peak memory of each, the padding's share, the ratios
preflight         what spag sees of the GPUs (spag.models.devices) and the preflight of configs/paper.yaml and
                  its toy and A100-40G versions in this checkout
play-embedded     self-play with the hf engine (and which path ran: fast or fallback, with the transformers
                  version), padded ``model.generate`` and ``generate_batch``, on the embedded shape: 32 games of
                  3 rounds
online            one online step (spag's online trainer on TRL's GRPOTrainer), the hf engine playing, embedded

Training parts run spag's own trainers (``spag.train.job.run_training``) as ``spag train`` runs them: the
policy in float32 under bfloat16 autocast, or in DeepSpeed's bfloat16 mode, gradient checkpointing on, rows cut
from the left to 2048 tokens.

Figures: tokens/s and episodes/s; model FLOPs utilisation (MFU) of training over the GPU's dense bfloat16 peak,
counting 6 x the parameters in matrix products per trained token (forward 2, backward 4), 2 more for a
reference forward pass inside the step (offline-po), and 4 + 2 for LoRA (no weight gradients of the frozen
weights; the adapters' are negligible), at the steady step rate (the median over steps after the first);
memory-bandwidth utilisation of decoding: the weights' bytes read once per forward pass (in play-bN the
key/value cache's reads not counted: a lower bound; in decode-step counted) over the GPU's peak bandwidth; peak
memory (torch.cuda.max_memory_allocated over the part's process, loading included) beside what spag's memory
plan (spag/models/memory.py) predicts, wherever the plan covers the part, and its error (measured over the plan
less its 1 GiB for the CUDA context). Each part's result also lists the heavy modules it found loaded
(``heavy_modules``, of :data:`HEAVY`).

Time: not yet measured with these parts. The check of 2026-11-27 (docs/gpu.md: 8 parts, the play parts at
batch 32, training steps of 4 short rows) took 435 s on an NVIDIA H200. Each part's limit and the 480-s budget
bound this one: with the default budget, the parts after the training parts (preflight, play-embedded,
online) run only while time is left, and ``--parts`` picks any of them. ``--cpu`` takes about 70 s on two
cores, each part a fork of the check (its imports done once); ``--cpu --spawn`` starts a new Python process for
each, as on a GPU (about 2.5 minutes). The JSON: see docs/gpu.md, "The GPU check"; ``python bench/epoch.py
JSON`` turns its play and training rates into configs/one-gpu.yaml's time per SPAG epoch.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from outputs import owned_or_new
from shapes import model_folder, random_weights, shape_config

HEAVY = ("polars", "duckdb", "dvc", "dvclive", "lm_eval", "wordfreq", "openai")
FAULT_VARIABLE = "SPAG_GPU_CHECK_FAULT"  # tests: "PART=crash" or "PART=hang", comma-separated
GIB = 2**30

# Dense bfloat16 peak FLOP/s (TFLOP/s) and memory bandwidth (TB/s) by GPU name (NVIDIA's data sheets, without
# sparsity); the first key found in torch's name for the device wins.
PEAK_TFLOPS = {
    "H200": 989.0,
    "H100 SXM": 989.0,
    "H100 80GB HBM3": 989.0,
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "A100": 312.0,
    "L40S": 362.0,
}
PEAK_BANDWIDTH = {
    "H200": 4.8,
    "H100 SXM": 3.35,
    "H100 80GB HBM3": 3.35,
    "H100 PCIe": 2.0,
    "A100-SXM4-80GB": 2.0,
    "A100 80GB": 2.0,
}

WORDS = [
    "coffee",
    "river",
    "winter",
    "garden",
    "engine",
    "violin",
    "bridge",
    "candle",
    "harbor",
    "pepper",
    "window",
    "forest",
    "ticket",
    "mirror",
    "pillow",
    "rocket",
    "castle",
    "basket",
    "planet",
    "tunnel",
    "kettle",
    "ladder",
    "jacket",
    "wallet",
    "anchor",
    "button",
    "carpet",
    "desert",
    "island",
    "marble",
    "pencil",
    "saddle",
]

# Sizes: on a GPU, and at toy size (--cpu).
PLAY = {
    False: {"words": 32, "max_turns": 3, "max_new_tokens": 32, "min_new_tokens": 2, "batch_size": 32},
    True: {"words": 2, "max_turns": 1, "max_new_tokens": 4, "min_new_tokens": 2, "batch_size": 2},
}
PLAY_BATCHES = (32, 128, 512)  # play-bN: games played together by the engine and by model.generate


def batch_sizes(batch: int, cpu: bool) -> dict:
    """play-bN's games: one round each (two replies of up to 32 tokens), as many games as the batch holds;
    --cpu: a sixteenth of them, replies of up to 4 tokens."""
    words = batch // 16 if cpu else batch
    return {
        "words": words,
        "max_turns": 1,
        "max_new_tokens": 4 if cpu else 32,
        "min_new_tokens": 2,
        "batch_size": words,
    }


DECODE = {  # decode-step: rows, prompt tokens, and the two reply lengths whose difference is timed
    False: {"batch": 64, "prompt_words": 300, "short": 8, "long": 40},
    True: {"batch": 2, "prompt_words": 8, "short": 2, "long": 6},
}
TRAIN = {  # rows per step are the part's (8 or 16 on a GPU; a quarter of them with --cpu)
    False: {"max_steps": 4, "max_length": 2048},
    True: {"max_steps": 3, "max_length": 64},
}
ONLINE = {
    False: {"words_per_step": 4, "games_per_word": 2, "max_turns": 2, "max_new_tokens": 32, "batch_size": 16},
    True: {"words_per_step": 1, "games_per_word": 2, "max_turns": 1, "max_new_tokens": 4, "batch_size": 2},
}
LORA_RANK = 16
ZERO3_CONFIG = ROOT / "configs" / "deepspeed_zero3_gpu.json"


def peak_of(table: dict, name: str) -> float | None:
    return next((value for key, value in table.items() if key in name), None)


# ------------------------------------------------------------------------------------------ in a part's process


@dataclass
class Context:
    """What a part's process knows: toy sizes on the CPU or not, and its own scratch folder."""

    cpu: bool
    work: Path

    @property
    def device(self) -> str:
        return "cpu" if self.cpu else "cuda"

    def model(self, shape: str) -> Path:
        return model_folder(shape, self.cpu, self.work / "models")

    def peaks(self) -> tuple[float | None, float | None]:
        """The GPU's bfloat16 peak (TFLOP/s) and memory bandwidth (TB/s); None on a CPU or an unknown GPU."""
        if self.cpu:
            return None, None
        import torch

        name = torch.cuda.get_device_name()
        return peak_of(PEAK_TFLOPS, name), peak_of(PEAK_BANDWIDTH, name)


def heavy_modules() -> list[str]:
    """The modules of :data:`HEAVY` this process has loaded."""
    return sorted({name.partition(".")[0] for name in sys.modules} & set(HEAVY))


def model_shape_of(shape: str, toy: bool):
    from spag.models.memory import model_shape

    return model_shape(shape_config(shape, toy))


def memory(ctx: Context, planned: int | None, covered: str | None = None) -> dict:
    """The part's peak device memory beside the plan's figure (``planned`` bytes, CUDA context included)."""
    from spag.models.memory import CUDA_OVERHEAD

    figures = {"planned_gib": None if planned is None else round(planned / GIB, 3)}
    if planned is None:
        figures["plan"] = covered or "not covered by spag's memory plan"
    if ctx.cpu:
        return {**figures, "peak_allocated_gib": None}
    import torch

    peak = torch.cuda.max_memory_allocated()
    figures.update(
        peak_allocated_gib=round(peak / GIB, 3),
        peak_reserved_gib=round(torch.cuda.max_memory_reserved() / GIB, 3),
    )
    if planned is not None:
        figures["plan_error"] = round(peak / (planned - CUDA_OVERHEAD) - 1, 3)
    return figures


def reset_memory(ctx: Context) -> None:
    gc.collect()
    if not ctx.cpu:
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def part_device(ctx: Context) -> dict:
    """The device as torch and the driver see it, the peaks the figures use, and the versions."""
    import torch

    from spag.models.devices import nvidia_gpus, torch_cuda
    from spag.players.provenance import machine

    tflops, bandwidth = ctx.peaks()
    found = {"name": "cpu"}
    if not ctx.cpu:
        properties = torch.cuda.get_device_properties(0)
        found = {
            "name": torch.cuda.get_device_name(),
            "memory_gib": round(properties.total_memory / GIB, 1),
            "capability": list(torch.cuda.get_device_capability()),
            "multiprocessors": properties.multi_processor_count,
        }
    return {
        **found,
        "peak_bf16_tflops": tflops,
        "peak_bandwidth_tbs": bandwidth,
        "driver_gpus": [gpu.__dict__ for gpu in nvidia_gpus()],
        "torch_cuda": torch_cuda().__dict__,
        **machine(),
    }


def part_preflight(ctx: Context) -> dict:
    """What spag sees of the GPUs, and the preflight of the paper's presets in this checkout."""
    from spag.config import load_settings
    from spag.models.devices import cuda_unusable, nvidia_gpus, visible_gpus
    from spag.pipeline.preflight import pipeline_problems, python_problem

    presets = {}
    paper = ROOT / "configs" / "paper.yaml"
    for name, overrides in (
        ("paper", []),
        ("paper-toy", ["paper-toy.yaml"]),
        ("paper-a100-40g", ["paper-a100-40g.yaml"]),
    ):
        settings = load_settings(paper, overrides=[ROOT / "configs" / o for o in overrides])
        problems, notes = pipeline_problems(settings, ROOT, "base_model")
        presets[name] = {"problems": [str(p) for p in problems], "notes": notes}
    return {
        "gpus": [g.__dict__ for g in nvidia_gpus()],
        "visible": len(visible_gpus()),
        "cuda_unusable": cuda_unusable(),
        "python": str(python_problem() or "ok"),
        "presets": presets,
    }


def part_play(
    ctx: Context,
    shape: str,
    sides: tuple[str, ...] = ("batched", "generate", "generate_batch"),
    sizes: dict | None = None,
) -> dict:
    """bench/play.py's hf ``sides``, one after another in this process, each on a model of ``shape`` built for
    it (by default the engine, padded ``model.generate`` and ``generate_batch``), on the same words, prompts
    and settings (``sizes``: :data:`PLAY`'s by default). ``engine_over_generate``: the engine's episodes/s over
    ``model.generate``'s."""
    import argparse as _argparse

    import play  # bench/play.py
    import transformers

    from spag.models.memory import play_bytes
    from spag.players.hf import missing_fast_path_api
    from spag.players.options import HFOptions
    from spag.players.provenance import player_provenance

    sizes = sizes or PLAY[ctx.cpu]
    play.bench_words = lambda count: (WORDS * (count // len(WORDS) + 1))[
        :count
    ]  # no word-frequency list needed
    loaded: dict = {}
    load_side = play.side_player

    def side_player(args):  # what the side's player is, read as it is loaded
        player = load_side(args)
        hf = getattr(player, "player", player)
        loaded.update(path="fast" if hf.fast else "fallback", provenance=player_provenance(hf))
        return player

    play.side_player = side_player
    bandwidth = ctx.peaks()[1]
    dtype = "float32" if ctx.cpu else "bfloat16"
    result: dict = {
        "settings": {**sizes, "temperature": 1.2, "top_k": 50, "dtype": dtype},
        "sides": {},
        "errors": [],
    }
    plan_shape = model_shape_of(shape, ctx.cpu)
    with random_weights(ctx.device) as built:
        for side in sides:
            args = _argparse.Namespace(
                side=side,
                model=str(ctx.model(shape)),
                dtype=dtype,
                device=ctx.device,
                temperature=1.2,
                top_k=50,
                seed=0,
                isa="native",
                threads=None,
                baseline_words=0,
                slice_start=0,
                slice_end=0,
                vllm_memory=0.0,
                cb_attention="sdpa",
                **sizes,
            )
            reset_memory(ctx)
            try:
                figures = play.run_side(args)
            except Exception as exc:  # noqa: BLE001 - one side failing leaves the others to run
                result["errors"].append(f"{side}: {type(exc).__name__}: {exc}")
                result["sides"][side] = {
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc().splitlines()[-8:],
                }
                continue
            model = built[-1]
            result["shapes"] = {shape: model.described()}
            rows, tokens = min(sizes["batch_size"], sizes["words"]), None
            if figures["utterances"]:
                tokens = -(-figures["prompt_tokens"] // figures["utterances"]) + sizes["max_new_tokens"]
            planned = None
            engine = side in ("batched", "counter", "static")
            if engine and tokens:
                planned = play_bytes(plan_shape, dtype, 1, rows, tokens, HFOptions().prefix_cache_gb)
                result["engine"] = {
                    **loaded,
                    "transformers": transformers.__version__,
                    "missing_fast_path_api": missing_fast_path_api(),
                }
            wall = figures["wall_s"]
            read_tbs = model.calls["forward_passes"] * model.weight_bytes / wall / 1e12
            figures.update(
                episodes_per_s=figures["episodes"] / wall,
                generated_tokens_per_s=figures["generated_tokens"] / wall,
                prompt_tokens_per_s=figures["prompt_tokens"] / wall,
                **model.calls,
                weights_read_tbs=round(read_tbs, 4),
                bandwidth_utilisation=round(read_tbs / bandwidth, 4) if bandwidth else None,
                memory=memory(
                    ctx,
                    planned,
                    None if engine else "the plan covers the hf engine, not model.generate's own batching",
                ),
            )
            result["sides"][side] = figures
            built.clear()
            partial(ctx, result)
    engine = next((result["sides"][s] for s in ("batched", "counter") if s in result["sides"]), None)
    generate = result["sides"].get("generate")
    if engine and generate and "episodes_per_s" in engine and "episodes_per_s" in generate:
        result["engine_over_generate"] = round(engine["episodes_per_s"] / generate["episodes_per_s"], 3)
    return result


def partial(ctx: Context, result: dict) -> None:
    """What a part has measured so far, where the check reads it if the part runs past its limit."""
    from spag.runtime.atomic import write_json_atomic

    write_json_atomic(ctx.work / "result.json", {**result, "partial": True, "heavy_modules": heavy_modules()})


def part_play_batch(ctx: Context, batch: int) -> dict:
    """The engine (the counter sampler, a GPU's default) against padded ``model.generate`` at 1.5B with
    ``batch`` games at once (:func:`batch_sizes`), then the hf backend's ``decoder: generate`` (bench/play.py's
    ``static`` side: the same games as the engine's, its compiling included in its time)."""
    # --cpu: the static side at the first batch only (the same code at every batch; eager on a CPU, it is slow)
    static = ("static",) if not ctx.cpu or batch == PLAY_BATCHES[0] else ()
    return {
        "batch": batch,
        **part_play(ctx, "qwen2.5-1.5b", ("counter", "generate", *static), batch_sizes(batch, ctx.cpu)),
    }


def synchronize(ctx: Context) -> None:
    if not ctx.cpu:
        import torch

        torch.cuda.synchronize()


def part_ceilings(ctx: Context) -> dict:
    """What this device reaches at best: a large matrix product (FLOP/s) and a large copy (bytes read and
    written per second), the ceilings the other parts' figures can be read against."""
    import torch

    dtype = torch.float32 if ctx.cpu else torch.bfloat16
    n, repeats = (256, 5) if ctx.cpu else (8192, 40)
    a, b = (torch.randn(n, n, device=ctx.device, dtype=dtype) for _ in range(2))
    c = torch.empty_like(a)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    synchronize(ctx)
    started = time.perf_counter()
    for _ in range(repeats):
        torch.matmul(a, b, out=c)
    synchronize(ctx)
    matmul_s = (time.perf_counter() - started) / repeats
    elements = (16 if ctx.cpu else 1024) * 2**20  # 64 MiB of float32 numbers, or 2 GiB of bfloat16
    source = torch.ones(elements, device=ctx.device, dtype=dtype)
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    synchronize(ctx)
    started = time.perf_counter()
    for _ in range(repeats):
        target.copy_(source)
    synchronize(ctx)
    copy_s = (time.perf_counter() - started) / repeats
    tflops, bandwidth = ctx.peaks()
    matmul_tflops = 2 * n**3 / matmul_s / 1e12
    copy_tbs = 2 * source.nbytes / copy_s / 1e12
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "matmul": {"n": n, "seconds": matmul_s, "tflops": round(matmul_tflops, 4)},
        "copy": {"bytes": source.nbytes, "seconds": copy_s, "tbs": round(copy_tbs, 5)},
        "matmul_over_peak": round(matmul_tflops / tflops, 4) if tflops else None,
        "copy_over_peak": round(copy_tbs / bandwidth, 4) if bandwidth else None,
    }


STATIC = ("decoder_generate", "generate_static")  # decode-step's sides on a static cache (compiled on a GPU)


def part_decode_step(ctx: Context) -> dict:
    """One decode step at 1.5B with :data:`DECODE`'s rows, four ways on one model: spag's engine (the counter
    sampler), spag's ``decoder: generate`` (:mod:`spag.players.hf.generate`), and ``model.generate`` with its
    dynamic cache and with a static cache, which transformers compiles on a GPU (torch.compile's
    reduce-overhead mode: the step replayed as a CUDA graph; on a CPU it runs eagerly). A side's step time is the difference between two calls that decode ``long``
    and ``short`` tokens (the end of a reply suppressed), over ``long - short``: prefill and set-up cancel.
    Each side runs once untimed first (for the static cache, that call compiles). ``bandwidth_utilisation``:
    the weights and the rows' keys and values read once per step, over the GPU's peak bandwidth."""
    import random

    import torch
    from transformers import StaticCache

    from spag.players import load_player
    from spag.players.hf.player import HFPlayer
    from spag.players.options import HFOptions

    sizes, shape = DECODE[ctx.cpu], "qwen2.5-1.5b"
    dtype = "float32" if ctx.cpu else "bfloat16"
    rng = random.Random(0)
    prompts = [
        " ".join(rng.choice(WORDS) for _ in range(sizes["prompt_words"])) for _ in range(sizes["batch"])
    ]
    reset_memory(ctx)
    with random_weights(ctx.device) as built:
        player = load_player(str(ctx.model(shape)), "hf", dtype=dtype, device=ctx.device, sampler="counter")
    model, hf = built[0], getattr(player, "player", player)
    encoded = [hf.encode(prompt) for prompt in prompts]
    width = max(map(len, encoded))
    pad = hf.tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=ctx.device)
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=ctx.device)
    sampling = {"temperature": 1.2, "top_k": 50}
    static = StaticCache(config=hf.model.config, max_cache_len=width + sizes["long"])

    def engine(tokens: int) -> None:
        hf.forget()  # each call encodes its prompts again
        hf.generate(prompts, max_new_tokens=tokens, min_new_tokens=tokens, seed=0, **sampling)

    def generate(tokens: int, cache=None) -> None:
        with torch.inference_mode():  # the static cache's tensors are made, and reset, in inference mode
            if cache is not None:
                cache.reset()
            hf.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=True,
                pad_token_id=pad,
                past_key_values=cache,
                **sampling,
            )

    by_generate = HFPlayer(
        hf.model, hf.tokenizer, options=HFOptions(device=ctx.device, sampler="counter", decoder="generate")
    )

    def decoder_generate(tokens: int) -> None:
        by_generate.generate(prompts, max_new_tokens=tokens, min_new_tokens=tokens, seed=0, **sampling)

    sides = {
        "engine": engine,
        "decoder_generate": decoder_generate,
        "generate": generate,
        "generate_static": lambda tokens: generate(tokens, static),
    }
    _, bandwidth = ctx.peaks()
    layout = model_shape_of(shape, ctx.cpu)
    cache_bytes_per_token = 2 * layout.layers * layout.kv_heads * layout.head_dim * (4 if ctx.cpu else 2)
    read_bytes = model.weight_bytes + sizes["batch"] * (width + sizes["long"]) * cache_bytes_per_token
    result: dict = {"settings": {**sizes, "prompt_tokens": width, "dtype": dtype}, "sides": {}, "errors": []}
    for name, run in sides.items():
        try:
            run(sizes["long"] if name in STATIC else sizes["short"])  # untimed: warm-up, compiling
            seconds = {}
            for length in ("short", "long"):
                synchronize(ctx)
                started = time.perf_counter()
                run(sizes[length])
                synchronize(ctx)
                seconds[length] = time.perf_counter() - started
        except Exception as exc:  # noqa: BLE001 - one side failing leaves the others to run
            result["errors"].append(f"{name}: {type(exc).__name__}: {exc}"[:2000])
            result["sides"][name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            continue
        step = max(seconds["long"] - seconds["short"], 1e-9) / (sizes["long"] - sizes["short"])
        result["sides"][name] = {
            "seconds": {k: round(v, 4) for k, v in seconds.items()},
            "step_ms": round(step * 1e3, 3),
            "bandwidth_utilisation": round(read_bytes / step / 1e12 / bandwidth, 4) if bandwidth else None,
        }
    for name in STATIC:
        result["sides"][name]["compiled"] = hasattr(hf.model, "_compiled_call")
    result.update(
        shapes={shape: model.described()},
        read_bytes_per_step=read_bytes,
        memory=memory(ctx, None),
    )
    return result


class StepClock:
    """The start of every ``Trainer.training_step`` (after the GPU finished the work before it) and the tokens of
    its batch: one optimiser step each with one micro-batch a step."""

    def __init__(self, cuda: bool):
        self.cuda, self.starts, self.tokens, self.widths, self.rows = cuda, [], [], [], []

    def __enter__(self):
        from transformers import Trainer

        self.original = Trainer.training_step
        clock = self

        def training_step(trainer, model, inputs, *args, **kwargs):
            clock.tick(inputs)
            return clock.original(trainer, model, inputs, *args, **kwargs)

        Trainer.training_step = training_step
        return self

    def __exit__(self, *exc):
        from transformers import Trainer

        Trainer.training_step = self.original

    def tick(self, inputs) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        self.starts.append(time.perf_counter())
        ids, mask = inputs.get("input_ids"), inputs.get("attention_mask")
        self.tokens.append(
            int(mask.sum()) if mask is not None else int(ids.numel()) if ids is not None else 0
        )
        self.widths.append(int(ids.shape[-1]) if ids is not None else 0)
        self.rows.append(int(ids.shape[0]) if ids is not None and ids.dim() > 1 else 0)

    def steady_tokens_per_s(self) -> float | None:
        """The median over steps 2.. of a step's tokens over the time to the next step's start."""
        rates = [t / (b - a) for t, a, b in zip(self.tokens[1:], self.starts[1:], self.starts[2:]) if b > a]
        return round(statistics.median(rates), 1) if rates else None


def train_rows(ctx: Context, rows: int) -> int:
    """Rows of a step: a part's (8 or 16) on a GPU, a quarter of them with --cpu."""
    return rows // 4 if ctx.cpu else rows


def train(
    ctx: Context, shape: str, method: str, rows: int, *, fill: bool = True, name: str = "", **knobs
) -> tuple[dict, StepClock, object]:
    """One run of spag's trainer with a model of ``shape`` built on the device, on synthetic game rows
    (bench/train.py's) long enough to fill ``max_length`` once cut from the left (``fill`` false: of their
    own lengths, a few hundred tokens), ``rows`` of them a step (one micro-batch): its summary, its step clock
    and the model built. ``name`` tells apart the runs of one part."""
    from train import synthetic_rows  # bench/train.py

    from spag.runtime.atomic import write_jsonl_atomic
    from spag.train.bookkeeping import read_summary
    from spag.train.job import run_training

    sizes = TRAIN[ctx.cpu]
    data = ctx.work / "rows.jsonl"
    filled = 6 * sizes["max_length"] if fill else 0
    write_jsonl_atomic(data, synthetic_rows(rows * sizes["max_steps"], min_chars=filled))
    out = ctx.work / f"out-{method}{name}"
    settings = {
        "max_steps": sizes["max_steps"],
        "batch_size": rows,
        "grad_accum": 1,
        "max_length": sizes["max_length"],
        "truncation": "left",
        "warmup_ratio": 0.0,
        "logging_steps": 1,
        "save_steps": 10**6,
        "live": False,
        "show_progress": False,
        "gradient_checkpointing": True,
        "bf16": not ctx.cpu,
        "device": ctx.device,
        "seed": 0,
        "ref_cache_dir": str(ctx.work / "ref-cache"),
        **knobs,
    }
    reset_memory(ctx)
    with random_weights(ctx.device) as built, StepClock(not ctx.cpu) as clock:
        run_training(method, str(ctx.model(shape)), str(data), str(out), **settings)
    return read_summary(out), clock, built[0]


def training_figures(
    ctx: Context,
    shape: str,
    summary: dict,
    clock: StepClock,
    model,
    flops_per_token: int,
    planned: int | None,
) -> dict:
    tflops, _ = ctx.peaks()
    steady = clock.steady_tokens_per_s()
    mfu = flops_per_token * model.matmul_parameters * steady / (tflops * 1e12) if steady and tflops else None
    return {
        "shapes": {shape: model.described()},
        "steps": summary["steps"],
        "tokens": summary["tokens"],
        "rows_per_step": max(clock.rows, default=0),
        "tokens_per_step": max(clock.tokens, default=0),
        "train_seconds": summary["train_seconds"],
        "tokens_per_s": summary["tokens_per_second"],
        "steady_tokens_per_s": steady,
        "flops_per_token": f"{flops_per_token} x {model.matmul_parameters}",
        "mfu": round(mfu, 4) if mfu is not None else None,
        "longest_batch_tokens": max(clock.widths, default=0),
        "reference": summary["reference"],
        "deepspeed": summary["provenance"]["deepspeed"],
        "memory": memory(ctx, planned),
    }


def one_process_world() -> None:
    """A world of one process, as ``torchrun --nproc_per_node 1`` would set it up (DeepSpeed's engine)."""
    from spag.models.devices import free_port

    os.environ.update(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )


def part_training(ctx: Context, method: str, rows: int, *, zero3: bool = False, lora: bool = False) -> dict:
    """One of spag's trainers at 1.5B (``lora``: the 7B with LoRA) with ``rows`` rows of ``max_length``
    tokens a step:

    - ``sft-kl``: no DeepSpeed, the reference's log-probs computed first (one model at a time);
    - ``offline-po``: no DeepSpeed, the reference on the fly beside the policy (float32 weights under bfloat16
      autocast, as the policy);
    - ``offline-po`` with ``zero3``: ZeRO-3 on one GPU (configs/deepspeed_zero3_gpu.json, nothing offloaded), the
      reference in the engine;
    - ``lora``: offline-po on the 7B, LoRA rank 16 on every linear layer, the reference being the same weights
      with the adapters off.
    """
    from spag.models.memory import lora_parameters, training_bytes, zero3_bytes

    shape = "llama-7b" if lora else "qwen2.5-1.5b"
    plan_shape = model_shape_of(shape, ctx.cpu)  # first: counting on the meta device fails under ZeRO-3
    rows = train_rows(ctx, rows)
    knobs: dict = {}
    if method == "offline-po":
        knobs["ref_on_the_fly"] = True
    if zero3:  # the core's run_training keeps it (spag.harness.zero, which would leave it out, is above)
        from spag.harness.environment import prepare_deepspeed

        if not ctx.cpu:
            one_process_world()
        prepare_deepspeed(on_cpu=ctx.cpu)  # as the harness does before a DeepSpeed run (on a CPU: gloo)
        knobs["deepspeed"] = str(ZERO3_CONFIG)
    if lora:
        knobs.update(lora_r=LORA_RANK, lora_alpha=2 * LORA_RANK, merge_lora=False)
    summary, clock, model = train(ctx, shape, method, rows, **knobs)
    width = max(clock.widths, default=0)
    if zero3:
        planned = zero3_bytes(
            plan_shape, 1, rows, width, offload_params=False, reference=True, offload_optimizer=False
        )
    else:
        planned = training_bytes(
            plan_shape,
            rows,
            width,
            lora_rank=LORA_RANK if lora else 0,
            reference_model=method == "offline-po" and not lora,
        )
    # 6 FLOPs a parameter and token (forward 2, backward 4), 2 more for the reference's forward on the fly;
    # LoRA: no weight gradients of the frozen weights (4 + the reference's 2)
    flops = 6 if lora or method == "sft-kl" else 8
    result = {
        "method": method,
        "zero3": zero3,
        **training_figures(ctx, shape, summary, clock, model, flops, planned),
    }
    if zero3:
        result["deepspeed_config"] = str(ZERO3_CONFIG.relative_to(ROOT))
    if lora:
        result["lora"] = {
            "rank": LORA_RANK,
            "target_modules": "all-linear",
            "parameters": lora_parameters(plan_shape, LORA_RANK),
        }
    return result


def part_padding_free(ctx: Context, rows: int) -> dict:
    """``sft-kl`` at 1.5B on game rows of their own lengths (bench/train.py's: a few hundred tokens each),
    ``rows`` of them a step, three times: in one padded micro-batch, then ``padding_free`` (the rows end to
    end, no padding computed), then ``padding_free`` in 4 micro-batches of balanced cost (``batch_rebalance``:
    the same rows a step, each micro-batch's own figures). All count the rows' own tokens; ``padding_share`` is
    the share of the padded batches' positions that were padding. Each side is kept as it finishes."""
    rows = train_rows(ctx, rows)
    shape, result = "qwen2.5-1.5b", {"method": "sft-kl", "sides": {}}
    rebalanced = {"padding_free": True, "batch_rebalance": True, "batch_size": rows // 4, "grad_accum": 4}
    for side, knobs in (("padded", {}), ("padding_free", {"padding_free": True}), ("rebalanced", rebalanced)):
        # rows of their own lengths: not cut to --cpu's toy max_length, which would make them all alike
        summary, clock, model = train(
            ctx, shape, "sft-kl", rows, fill=False, name=side, max_length=2048, **knobs
        )
        figures = training_figures(ctx, shape, summary, clock, model, 6, None)
        del model
        gc.collect()
        if side == "padded":
            positions = sum(r * w for r, w in zip(clock.rows, clock.widths))
            figures["padding_share"] = round(1 - sum(clock.tokens) / positions, 4) if positions else None
        result["sides"][side] = figures
        partial(ctx, result)
    rates = [
        result["sides"][side]["steady_tokens_per_s"] for side in ("padded", "padding_free", "rebalanced")
    ]
    result["padding_free_over_padded"] = round(rates[1] / rates[0], 3) if all(rates[:2]) else None
    result["rebalanced_over_padding_free"] = round(rates[2] / rates[1], 3) if all(rates[1:]) else None
    return result


def part_online(ctx: Context) -> dict:
    """One online step: spag's online trainer (TRL's GRPOTrainer) with the hf engine playing the games."""
    from spag.config import Online, Reward, TrainConfig
    from spag.play.engine import PlayConfig
    from spag.train.bookkeeping import read_summary
    from spag.train.online import OnlineGames, run_online

    sizes, shape = ONLINE[ctx.cpu], "embedded"
    games = OnlineGames(
        play=PlayConfig.of(
            max_turns=sizes["max_turns"], max_new_tokens=sizes["max_new_tokens"], temperature=1.0, seed=0
        ),
        online=Online(words_per_step=sizes["words_per_step"], games_per_word=sizes["games_per_word"]),
        reward=Reward(keep_truncated=True),
    )
    config = TrainConfig(
        batch_size=sizes["batch_size"],
        max_steps=1,
        live=False,
        show_progress=False,
        logging_steps=1,
        warmup_ratio=0.0,
        seed=0,
        bf16=not ctx.cpu,
        device=ctx.device,
        save_steps=10**6,
    )
    reset_memory(ctx)
    out = ctx.work / "online"
    with random_weights(ctx.device) as built:
        run_online(
            str(ctx.model(shape)),
            WORDS[: sizes["words_per_step"]],
            out,
            games=games,
            config=config,
            episodes_dir=ctx.work / "episodes",
        )
    summary = read_summary(out)
    play_seconds = summary["play_seconds"] or None
    return {
        "shapes": {shape: built[0].described()},
        "settings": sizes,
        "steps": summary["steps"],
        "games": summary["games"],
        "generated_tokens": summary["generated_tokens"],
        "play_seconds": play_seconds,
        "episodes_per_s": summary["games"] / play_seconds if play_seconds else None,
        "generated_tokens_per_s": summary["generated_tokens"] / play_seconds if play_seconds else None,
        "online_seconds": summary["online_seconds"],
        "utterances": summary["utterances"],
        "memory": memory(ctx, None),
    }


@dataclass(frozen=True)
class Part:
    run: object
    limit_s: int  # on a GPU; --cpu allows CPU_LIMIT_S


PARTS = {  # in the order they run; with the default budget the last ones are skipped once it is spent
    "device": Part(part_device, 60),
    "ceilings": Part(part_ceilings, 45),
    "decode-step": Part(part_decode_step, 150),
    **{f"play-b{b}": Part(functools.partial(part_play_batch, batch=b), 60 + b // 4) for b in PLAY_BATCHES},
    "sft-kl-8x2048": Part(functools.partial(part_training, method="sft-kl", rows=8), 90),
    "sft-kl-16x2048": Part(functools.partial(part_training, method="sft-kl", rows=16), 90),
    "offline-po-8x2048": Part(functools.partial(part_training, method="offline-po", rows=8), 90),
    "offline-po-16x2048": Part(functools.partial(part_training, method="offline-po", rows=16), 90),
    "offline-po-zero3-8x2048": Part(
        functools.partial(part_training, method="offline-po", rows=8, zero3=True), 120
    ),
    "lora-llama-7b-8x2048": Part(
        functools.partial(part_training, method="offline-po", rows=8, lora=True), 120
    ),
    "sft-kl-rows-32": Part(functools.partial(part_padding_free, rows=32), 160),
    "preflight": Part(part_preflight, 60),
    "play-embedded": Part(lambda ctx: part_play(ctx, "embedded"), 150),
    "online": Part(part_online, 120),
}
CPU_LIMIT_S = 300
BUDGET_S = 480  # the whole check on a GPU: parts past it are skipped (it took 435 s on an H200, docs/gpu.md)


def forced_fault(part: str) -> None:
    """What :data:`FAULT_VARIABLE` asks of this part, for tests: fail at once, or hang."""
    faults = dict(item.split("=", 1) for item in os.environ.get(FAULT_VARIABLE, "").split(",") if "=" in item)
    if faults.get(part) == "crash":
        raise RuntimeError(f"forced failure of part {part} ({FAULT_VARIABLE})")
    if faults.get(part) == "hang":
        time.sleep(10**6)


def run_in_this_process(part: str, ctx: Context) -> int:
    """Run one part here and write its result (or its error) to ``result.json`` in its scratch folder."""
    from spag.runtime.atomic import write_json_atomic

    try:
        forced_fault(part)
        result = PARTS[part].run(ctx)
        code = 1 if result.get("errors") else 0
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever stopped the part is its result
        result = {
            "error": f"{type(exc).__name__}: {exc}"[:2000],
            "traceback": traceback.format_exc().splitlines()[-12:],
        }
        code = 1
    result["heavy_modules"] = heavy_modules()
    write_json_atomic(ctx.work / "result.json", result)
    return code


# ------------------------------------------------------------------------------------------ the check


def child_environment(cpu: bool) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("HF_HUB_OFFLINE", "1")  # models are built here; nothing comes from the hub
    if cpu:
        env["DS_ACCELERATOR"] = "cpu"
    return env


# --cpu: what every part's process imports, loaded once by the check and inherited by each part's process (a
# fork): a toy part runs in a second or two, its imports took five. On a GPU each part is a new Python process
# (CUDA does not survive a fork), as --cpu --spawn runs them.
PRELOAD = ("torch", "transformers", "transformers.trainer", "deepspeed")


def preload() -> None:
    import importlib

    os.environ.update(child_environment(True))
    for module in PRELOAD:
        importlib.import_module(module)


def forked_part(part: str, work: Path, output) -> int:
    """--cpu: the part run in a fork of this process (its own session, its output to ``output``); its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        os.chdir(ROOT)
        code = run_in_this_process(part, Context(True, work))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def wait_for(pid: int, limit_s: float) -> tuple[int | None, bool]:
    """A forked part's exit code (None where it ran past ``limit_s``) and whether it did."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        time.sleep(0.05)
    return None, True


def run_part(part: str, cpu: bool, scratch: Path, limit_s: float, fork: bool = False) -> dict:
    """One part in a child process (its own session, killed whole at ``limit_s``): its entry of the JSON.
    ``fork``: a fork of this process (``--cpu`` with every part), else a new Python process."""
    work = scratch / part
    work.mkdir(parents=True)
    log = work / "output.log"
    started = time.perf_counter()
    with open(log, "wb") as output:
        if fork:
            pid = forked_part(part, work, output)
            code, timed_out = wait_for(pid, limit_s)
        else:
            command = [sys.executable, str(Path(__file__).resolve()), "--part", part, "--work", str(work)]
            child = subprocess.Popen(
                command + (["--cpu"] if cpu else []),
                stdout=output,
                stderr=subprocess.STDOUT,
                env=child_environment(cpu),
                start_new_session=True,
                cwd=ROOT,
            )
            pid = child.pid
            try:
                code, timed_out = child.wait(timeout=limit_s), False
            except subprocess.TimeoutExpired:
                code, timed_out = None, True
        try:  # the part's process and whatever it started (DeepSpeed's, a data loader's)
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if fork:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # reaped above
                pass
        else:
            child.wait()
    entry: dict = {
        "status": "timeout" if timed_out else "ok" if code == 0 else "failed",
        "seconds": round(time.perf_counter() - started, 1),
        "limit_s": limit_s,
        "exit_code": code,
    }
    result_file = work / "result.json"
    if result_file.is_file():
        entry["result"] = json.loads(result_file.read_text(encoding="utf-8"))
    if entry["status"] != "ok":
        said = entry.get("result", {}).get("error") or "; ".join(entry.get("result", {}).get("errors", []))
        entry["error"] = f"ran past its limit of {limit_s:g} s" if timed_out else said or f"exit code {code}"
        entry["output_tail"] = log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
    return entry


class CheckError(Exception):
    """An argument the check cannot run with: one line naming it."""


def limits(value: str | None, cpu: bool) -> dict[str, float]:
    """Each part's limit: the default, ``--timeout S`` for all, or ``--timeout PART=S,...`` for some (a positive
    number of seconds, a part of the check: CheckError otherwise)."""
    chosen = {name: float(CPU_LIMIT_S if cpu else part.limit_s) for name, part in PARTS.items()}
    for item in filter(None, (value or "").split(",")):
        name, _, seconds = item.rpartition("=")
        if name and name not in PARTS:
            raise CheckError(f"--timeout {item}: {name} is not a part (the parts: {', '.join(PARTS)})")
        try:
            limit = float(seconds)
        except ValueError:
            raise CheckError(f"--timeout {item}: {seconds!r} is not a number of seconds") from None
        if not 0 < limit < float("inf"):
            raise CheckError(f"--timeout {item}: a part needs a positive, finite number of seconds")
        for key in [name] if name else chosen:
            chosen[key] = limit
    return chosen


def check_arguments(args) -> tuple[Path, list[str], dict[str, float], float | None]:
    """The output, the parts, their limits and the budget of a check, each checked (CheckError naming the first
    that cannot run)."""
    from spag.harness.rule import check_output_file
    from spag.runtime.errors import DataError

    out = Path(args.out)
    if not owned_or_new(out, "check", "bench/gpu.py"):
        raise CheckError(
            f"--out {out}: something is there that is not this check's JSON; choose another path"
        )
    try:
        check_output_file(
            out, "--out", replace="any"
        )  # owned_or_new: nothing or an earlier JSON of the check
    except DataError as exc:
        raise CheckError(str(exc)) from None
    chosen = [p for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PARTS]
    if unknown:
        raise CheckError(f"--parts: unknown {', '.join(unknown)} (the parts: {', '.join(PARTS)})")
    if not chosen:
        raise CheckError(f"--parts: name at least one part (the parts: {', '.join(PARTS)})")
    budget = args.budget if args.budget is not None else (None if args.cpu else BUDGET_S)
    if budget is not None and not 0 < budget < float("inf"):
        raise CheckError(f"--budget {budget:g}: give a positive, finite number of seconds")
    return out, chosen, limits(args.timeout, args.cpu), budget


def headline(part: str, entry: dict) -> str:
    """One line of figures for the table printed at the end."""
    result = entry.get("result", {})
    if entry["status"] != "ok":
        return f"{entry['status'].upper()}: {entry.get('error', '')}"[:160]
    if part == "ceilings":
        return f"matmul {result['matmul']['tflops']} TFLOP/s, copy {result['copy']['tbs']} TB/s"
    if part == "decode-step":
        return "; ".join(
            f"{side} {f.get('step_ms', 'failed')} ms/step, bw {f.get('bandwidth_utilisation')}"
            for side, f in result["sides"].items()
        )
    if "padding_free_over_padded" in result:
        return (
            "; ".join(
                f"{side} {f['steady_tokens_per_s']} tok/s steady, MFU {f['mfu']}"
                for side, f in result["sides"].items()
            )
            + f"; padding {result['sides'].get('padded', {}).get('padding_share')}; ratios "
            f"{result['padding_free_over_padded']}, {result.get('rebalanced_over_padding_free')}"
        )
    if "sides" in result:
        return (
            "; ".join(
                f"{side} failed"
                if "error" in f
                else f"{side} {f['episodes_per_s']:.2f} ep/s, {f['generated_tokens_per_s']:.0f} tok/s, "
                f"bw {f['bandwidth_utilisation']}"
                for side, f in result["sides"].items()
            )
            + f"; engine path {result.get('engine', {}).get('path')}"
            + (
                f"; engine/generate {result['engine_over_generate']}"
                if "engine_over_generate" in result
                else ""
            )
        )
    if "mfu" in result:
        m = result["memory"]
        return (
            f"{result['steady_tokens_per_s']} tok/s steady, MFU {result['mfu']}, peak {m.get('peak_allocated_gib')} "
            f"GiB, plan {m.get('planned_gib')} GiB"
        )
    if "games" in result:
        return f"{result['games']} games, {result['episodes_per_s']} ep/s in play, {result['steps']} step"
    if part == "device":
        return f"{result.get('name')}, torch {result.get('torch_cuda', {}).get('version')}"
    return "ok"


def run_check(args) -> int:
    from spag import __version__
    from spag.runtime.atomic import write_json_atomic

    try:
        out, chosen, limit, budget = check_arguments(args)
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = {
        "check": "bench/gpu.py",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "cpu_mode": args.cpu,
        "spag": __version__,
        "python": sys.version.split()[0],
        "parts_asked": chosen,
        "shapes": {},
        "parts": {},
        "finished": False,
    }
    results.update(budget_s=budget, limits_s={part: limit[part] for part in chosen})
    write_json_atomic(out, results)
    started = time.perf_counter()
    fork, preloaded = args.cpu and not args.spawn, False
    with tempfile.TemporaryDirectory(prefix="spag-gpu-check-") as scratch:
        for part in chosen:
            left = None if budget is None else budget - (time.perf_counter() - started)
            if left is not None and left < 5:
                results["parts"][part] = {
                    "status": "skipped",
                    "error": f"the check's budget of {budget:g} s was spent",
                }
                print(f"{part}: skipped (the budget of {budget:g} s is spent)", flush=True)
                continue
            print(f"{part} ...", flush=True)
            if fork and not preloaded:  # before the first part that runs (none may: the budget)
                preload()
                preloaded = True
            entry = run_part(
                part,
                args.cpu,
                Path(scratch),
                limit[part] if left is None else min(limit[part], left),
                fork=fork,
            )
            results["parts"][part] = entry
            results["shapes"].update(entry.get("result", {}).get("shapes", {}))
            if part == "device" and entry["status"] == "ok":
                results["device"] = {
                    k: entry["result"].get(k) for k in ("name", "peak_bf16_tflops", "peak_bandwidth_tbs")
                }
            results["seconds"] = round(time.perf_counter() - started, 1)
            write_json_atomic(out, results)
            print(f"{part}: {entry['status']} in {entry['seconds']} s: {headline(part, entry)}", flush=True)
    results["finished"] = True
    results["seconds"] = round(time.perf_counter() - started, 1)
    write_json_atomic(out, results)
    failed = [p for p, e in results["parts"].items() if e["status"] != "ok"]
    print(
        f"{len(chosen) - len(failed)} of {len(chosen)} parts ran in {results['seconds']} s"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + f"; figures in {out}"
    )
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check.json", help="the JSON, rewritten after every part")
    parser.add_argument("--parts", default=",".join(PARTS), help="which parts, comma-separated, in order")
    parser.add_argument("--timeout", help="seconds a part may take: one number for all, or PART=S,...")
    parser.add_argument(
        "--budget",
        type=float,
        help=f"seconds for the whole check: parts past it are skipped "
        f"(default {BUDGET_S} on a GPU, none with --cpu)",
    )
    parser.add_argument("--cpu", action="store_true", help="toy sizes on the CPU: check that every part runs")
    parser.add_argument(
        "--spawn",
        action="store_true",
        help="with --cpu: each part in a new Python process, as on a GPU (else a fork of the check's, its "
        "imports done once)",
    )
    parser.add_argument("--part", choices=list(PARTS), help=argparse.SUPPRESS)  # in a part's own process
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        sys.exit(run_in_this_process(args.part, Context(args.cpu, Path(args.work))))
    sys.exit(run_check(args))


if __name__ == "__main__":
    main()
