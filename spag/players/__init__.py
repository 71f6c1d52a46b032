"""Players: one interface (:class:`Player`), several backends.

``load_player(model, backend)`` returns a player for an HF id or local checkpoint (``hf``), a vLLM
engine (``vllm``: on a GPU, or vLLM's CPU build), an OpenAI-compatible endpoint (``openai``), or a
person at the terminal (``human``, also chosen by the model name ``human``). Backends are imported only
when used. Whoever loads a player closes it (:func:`close_player`): a vLLM engine holds its memory
until then.
"""

from __future__ import annotations

from spag.players.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    STOP_STRINGS,
    Player,
    PlayerError,
    Reply,
    clean_reply,
    derive_seed,
)

BACKENDS = ("hf", "vllm", "openai", "human")

__all__ = [
    "BACKENDS", "FINISH_LENGTH", "FINISH_STOP", "STOP_STRINGS", "Player", "PlayerError", "Reply",
    "clean_reply", "close_player", "derive_seed", "load_player",
]

_HF_OPTIONS = {"device", "dtype", "trust_remote_code", "max_batch", "prefill_tokens", "prefix_cache_gb",
               "name", "max_prompt_tokens"}
_VLLM_OPTIONS = {"dtype", "trust_remote_code", "tensor_parallel_size", "gpu_memory_utilization", "enforce_eager",
                 "name", "seed", "max_prompt_tokens"}
_OPENAI_OPTIONS = {"base_url", "api_key_env", "concurrency", "timeout", "max_retries", "api", "extensions",
                   "name"}


def _pick(options: dict, allowed: set[str]) -> dict:
    """Options meant for this backend; ``None`` values mean "the backend's default"."""
    return {k: v for k, v in options.items() if k in allowed and v is not None}


def load_player(model: str, backend: str = "hf", **options) -> Player:
    """A player for ``model`` on ``backend``. Options a backend does not use are ignored.

    options: device, dtype, trust_remote_code, max_batch, prefill_tokens, max_prompt_tokens (hf, vllm); tensor_parallel_size,
    gpu_memory_utilization, enforce_eager (vllm); base_url, api_key_env, concurrency, timeout, max_retries, api (openai).
    """
    if model == "human" or backend == "human":
        from spag.players.human import HumanPlayer

        return HumanPlayer(**({"name": options["name"]} if options.get("name") else {}))
    from spag.fingerprint import model_fingerprint

    if backend == "hf":
        from spag.players.hf import HFPlayer

        player = HFPlayer.from_pretrained(model, **_pick(options, _HF_OPTIONS))
        player.fingerprint = model_fingerprint(model)  # what resumed episodes are checked against
        return player
    if backend == "vllm":
        from spag.players.vllm import VLLMPlayer

        player = VLLMPlayer.from_pretrained(model, **_pick(options, _VLLM_OPTIONS))
        player.fingerprint = model_fingerprint(model)
        return player
    if backend == "openai":
        from spag.players.openai import OpenAIPlayer

        return OpenAIPlayer(model, **_pick(options, _OPENAI_OPTIONS))
    raise ValueError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")


def close_player(*players) -> None:
    """Give back what each player holds (a vLLM engine's memory); players without ``close`` hold nothing."""
    for player in dict.fromkeys(players):  # the same player on both sides is closed once
        close = getattr(player, "close", None)
        if callable(close):
            close()
