"""The one interface every player implements, and what a reply looks like.

A player turns prompts into replies. A *prompt* here is the text of one user message, as a game builds
it (:meth:`spag.game.base.Game.prompt`); each backend renders it into its own model input (the HF and
vLLM backends with :func:`spag.models.chat.to_model_input` and the model's own tokenizer, the OpenAI backend as
a chat message, the human backend by printing it). So a player never needs to know how another player's
model formats its input, and the two sides of a game can be different models. Players know no game:
what ends a reply (stop strings, a stop pattern) is given with each call.

A backend returns the raw text of each reply, already cut where the speaker's turn ended (end-of-turn
token, a stop string or pattern, or ``max_new_tokens``); the game then makes an utterance of it
(:meth:`spag.game.base.Game.utterance`).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

FINISH_STOP = "stop"  # the model ended its turn (end-of-turn token or a stop string)
FINISH_LENGTH = "length"  # cut at max_new_tokens: the model did not end its turn by itself


@dataclass(frozen=True)
class Reply:
    """One generated reply: its text, how many tokens it cost, and why it ended."""

    text: str
    n_tokens: int
    finish_reason: str = FINISH_STOP

    @property
    def truncated(self) -> bool:
        return self.finish_reason == FINISH_LENGTH


@runtime_checkable
class Player(Protocol):
    """Anything that can speak in the game: a model behind some backend, or a person.

    ``generate`` takes user-message texts (see the module docstring) and returns one Reply per prompt, in
    order. ``temperature == 0`` means greedy decoding. ``seed`` is one seed for the call or one per prompt;
    per-prompt seeds make a game's sampling independent of which other games share its batch.
    ``min_new_tokens`` keeps the model from ending its turn before saying anything; ``stop`` are literal
    strings that end a reply (they are not part of the returned text), and so does a match of the regular
    expression ``stop_pattern`` (:func:`cut_at`; a backend that takes few literal stops uses the first
    ones and cuts at the pattern after). Without either a reply runs to the model's end-of-turn token or
    ``max_new_tokens``, as the original project's play did.
    """

    name: str

    def generate(
        self,
        prompts: Sequence[str],
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 256,
        min_new_tokens: int = 1,
        seed: int | Sequence[int] | None = None,
        stop: Sequence[str] = (),
        stop_pattern: str | None = None,
    ) -> list[Reply]: ...


def per_prompt_seeds(seed: int | Sequence[int] | None, n: int) -> list[int | None]:
    """Expand a call's ``seed`` argument to one seed (or None) per prompt."""
    if seed is None or isinstance(seed, int):
        return [seed] * n if seed is None else [int(seed) + i for i in range(n)]
    seeds = [None if s is None else int(s) for s in seed]
    if len(seeds) != n:
        raise ValueError(f"got {len(seeds)} seeds for {n} prompts")
    return seeds


def derive_seed(*keys: object) -> int:
    """A stable 31-bit seed from any keys (the run's seed, a word's index, an utterance number, ...)."""
    digest = hashlib.sha256("\x1f".join(map(str, keys)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def text_ids(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` alone, no special tokens (``[]`` for no text): what follows a prompt's model
    input, such as the opening of a reply."""
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def turn_end_ids(tokenizer, eos_ids: Sequence[int] = (), vocab_size: int | None = None) -> list[int]:
    """Token ids that end a turn: eos (the chat template's end-of-turn) and every other special token.

    A reply never legitimately contains a special token; a model that writes one has left its turn.
    ``eos_ids`` adds the model's own (its generation config's); ids outside ``vocab_size`` are left out.
    """
    ids = set(tokenizer.all_special_ids) | {tokenizer.eos_token_id} | set(eos_ids)
    limit = vocab_size if vocab_size is not None else float("inf")
    return sorted(i for i in ids if i is not None and 0 <= i < limit)


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def cut_at(text: str, pattern: str | None) -> tuple[str, bool]:
    """``text`` up to the first match of the regular expression ``pattern`` (a game's stop pattern), and
    whether it was cut there; None cuts nothing."""
    match = _compiled(pattern).search(text) if pattern else None
    if match is None:
        return text, False
    return text[: match.start()], True


# ------------------------------------------------------------------------------- a player in a game


@dataclass(frozen=True)
class Turn:
    """One utterance a game waits for: whose turn, in the game on which target (``word``), after what was
    said.

    ``prompt`` is the game's own prompt for it (:meth:`spag.game.base.Game.prompt`); ``seed`` the seed of this
    utterance of this game (its first attempt's sampling seed): a strategy that draws without the model
    draws from it, so that each game's draws are its own, whatever its batch-mates and wherever a resumed
    run took up again (None: a turn asked outside a played game).
    """

    role: str
    word: str
    history: Sequence[dict]
    prompt: str
    seed: int | None = None


class Speaker:
    """A :class:`Player` as the play engine uses it: what the model is asked at a turn, what of its reply
    is said, which utterance is sent back for another sample, and which turns need no model at all.

    This plain speaker asks the game's prompt and says the reply; a game's strategies
    (:meth:`spag.game.base.Game.speaker`) wrap it and change one of these steps each.
    """

    resamples = 0  # how many times a turn's utterance may be rejected (see :meth:`rejects`)

    def __init__(self, player: Player):
        self.player = player

    def prompt(self, turn: Turn) -> str:
        return turn.prompt

    def utterance(self, turn: Turn, text: str) -> str:
        """What is said, from the game's utterance ``text`` of the reply."""
        return text

    def rejects(self, turn: Turn, text: str) -> bool:
        """Whether ``text`` must be sampled again (at most :attr:`resamples` times)."""
        return False

    def given(self, turns: Sequence[Turn]) -> list[str | None]:
        """Utterances said without asking the model (None where the model speaks)."""
        return [None] * len(turns)
