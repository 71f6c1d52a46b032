"""Which models and transformers releases the fast decoding loop serves; the rest use ``model.generate``."""

from __future__ import annotations

import importlib
import inspect
import sys

# What the fast path builds on, module by module. transformers 5.19 (both locks pin it) has all of it;
# tests/test_hf_internals.py checks how each piece behaves. 5.17 (the GPU image's) has it too: from 5.17 to
# 5.19 these modules changed only where the fast path does not go (sliding-window, quantized and indexed
# cache layers, keywords deprecated since, paged caches), and test_hf_internals.py and test_players.py pass
# under 5.17 (with the image's huggingface_hub 1.33). A release without one piece gets the model.generate
# path, said once in a note and in the player's provenance (path: fallback).
FAST_PATH_API = {
    "transformers.cache_utils": ("Cache", "DynamicCache", "DynamicLayer"),
    "transformers": ("AttentionInterface", "AttentionMaskInterface"),
    "transformers.masking_utils": ("sdpa_mask",),
    "transformers.integrations.sdpa_attention": ("sdpa_attention_forward",),
    "transformers.modeling_utils": ("PreTrainedModel",),
}


def missing_fast_path_api() -> str | None:
    """The first piece of the transformers API that the fast path needs and this install lacks, or None."""
    for module_name, names in FAST_PATH_API.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return module_name
        for name in names:
            if not hasattr(module, name):
                return f"{module_name}.{name}"
    from transformers.cache_utils import Cache
    from transformers.modeling_utils import PreTrainedModel

    if "layers" not in inspect.signature(Cache.__init__).parameters:
        return "transformers.cache_utils.Cache(layers=...)"
    if not hasattr(PreTrainedModel, "set_attn_implementation"):
        return "transformers.PreTrainedModel.set_attn_implementation"
    return None


def supports_fast_path(config) -> bool:
    """True for decoder-only models with plain causal self-attention in every layer."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types and any(t != "full_attention" for t in layer_types):
        return False
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return False
    return not getattr(text, "is_encoder_decoder", False)


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def fallback_reason(config) -> str | None:
    """Why the fast path cannot serve a model of ``config`` here (None: it can)."""
    if not supports_fast_path(config):
        return "the model's attention is not plain causal self-attention in every layer"
    missing = missing_fast_path_api()
    return None if missing is None else f"transformers {transformers_version()} lacks {missing}"


_TOLD: set[str] = set()


def tell_fallback(reason: str) -> None:
    """Say once per process, in one line, that the hf backend falls back to ``model.generate``, and why."""
    if reason not in _TOLD:
        _TOLD.add(reason)
        print(
            f"note: hf backend: {reason}: it plays through model.generate, one prompt at a time (correct, "
            "slower)",
            file=sys.stderr,
            flush=True,
        )
