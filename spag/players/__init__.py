"""Players: one interface (:class:`Player`), several backends.

``load_player(model, backend)`` returns a player for an HF id or local checkpoint (``hf``), a vLLM
engine (``vllm``: on a GPU, or vLLM's CPU build), an OpenAI-compatible endpoint (``openai``), or a
person at the terminal (``human``, also chosen by the model name ``human``). Each backend imports its
library (torch, vLLM, the OpenAI SDK) only when it loads a player. Whoever loads a player closes it
(:func:`close_player`): a vLLM engine holds its memory until then. A caller that holds several players at
once lets each drop what it keeps between calls (:func:`forget_prompts`) when their prompts change.

Players know no game. May import :mod:`spag.models`, :mod:`spag.schema` and :mod:`spag.runtime`.
"""

from __future__ import annotations

from spag.players.base import FINISH_LENGTH, FINISH_STOP, OPTIONS, Player, Reply, backend_options, derive_seed
from spag.players.hf import HFPlayer
from spag.players.human import HumanPlayer
from spag.players.openai import OpenAIPlayer
from spag.players.vllm import VLLMPlayer
from spag.runtime.errors import PlayerError
from spag.runtime.fingerprint import model_fingerprint

BACKENDS = ("hf", "vllm", "openai", "human")

__all__ = [
    "BACKENDS", "FINISH_LENGTH", "FINISH_STOP", "Player", "PlayerError", "Reply", "backend_options",
    "close_player", "derive_seed", "forget_prompts", "load_player",
]


def _pick(backend: str, options: dict) -> dict:
    """The options for ``backend``; ``None`` values mean "the backend's default". ValueError naming an
    option the backend does not take."""
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - OPTIONS[backend])
    if unknown:
        raise ValueError(f"the {backend} backend takes no option {', '.join(unknown)} "
                         f"(it takes {', '.join(sorted(OPTIONS[backend]))})")
    return given


def load_player(model: str, backend: str = "hf", **options) -> Player:
    """A player for ``model`` on ``backend``. An option the backend does not take is a ValueError.

    options: device, dtype, trust_remote_code, max_batch, prefill_tokens, max_prompt_tokens (hf, vllm); tensor_parallel_size,
    gpu_memory_utilization, enforce_eager (vllm); base_url, api_key_env, concurrency, timeout, max_retries, api (openai).
    """
    if backend not in OPTIONS:
        raise ValueError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
    if model == "human" or backend == "human":
        # the person at the terminal: options given for the model on the other side do not apply to them
        return HumanPlayer(**({"name": options["name"]} if options.get("name") else {}))
    if backend == "hf":
        player = HFPlayer.from_pretrained(model, **_pick("hf", options))
        player.fingerprint = model_fingerprint(model)  # what resumed episodes are checked against
        return player
    if backend == "vllm":
        player = VLLMPlayer.from_pretrained(model, **_pick("vllm", options))
        player.fingerprint = model_fingerprint(model)
        return player
    return OpenAIPlayer(model, **_pick("openai", options))


def forget_prompts(*players) -> None:
    """Let each player drop the prompt keys/values it keeps between calls (the hf backend's prefix store,
    up to ``prefix_cache_gb`` each); players that keep nothing are left alone."""
    for player in dict.fromkeys(players):
        forget = getattr(player, "forget", None)
        if callable(forget):
            forget()


def close_player(*players) -> None:
    """Give back what each player holds (a vLLM engine's memory); players without ``close`` hold nothing."""
    for player in dict.fromkeys(players):  # the same player on both sides is closed once
        close = getattr(player, "close", None)
        if callable(close):
            close()
