"""A prompt as a model reads it: one user message in the model's chat template (or a plain layout).

Games and the general SFT rows speak in the text of one user message; each backend that runs a local
model turns that text into its input here, with the model's own tokenizer. A :class:`RawPrompt` is
already the model's whole input (the original project's framing). Nothing here knows any game.
"""

from __future__ import annotations

PLAIN_USER_PREFIX = "### Instruction:\n"
PLAIN_REPLY_PREFIX = "\n\n### Response:\n"


class RawPrompt(str):
    """A prompt that already is the model's whole input (the original project's framing): it is fed as
    BOS + its tokens, with no chat template and no plain layout around it (:func:`model_input_ids`).

    Everything else a prompt goes through (players, teacher strategies, rows) treats it as the string it
    is; only the rendering below looks at its type.
    """

    __slots__ = ()


def has_chat_template(tokenizer) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def to_model_input(tokenizer, user_text: str) -> str:
    """The full model input for one user message, ending where the model's reply starts (a
    :class:`RawPrompt` is its own model input)."""
    if isinstance(user_text, RawPrompt):
        return str(user_text)
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
        )
    return PLAIN_USER_PREFIX + user_text + PLAIN_REPLY_PREFIX


def raw_prompt_ids(tokenizer, text: str) -> list[int]:
    """BOS (when the tokenizer has one) + the text's tokens: how the original tokenised its queries."""
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    return bos + list(tokenizer(str(text), add_special_tokens=False)["input_ids"])


def model_input_ids(tokenizer, user_text: str, max_tokens: int | None = None) -> list[int]:
    """Token ids of :func:`to_model_input`: a chat template writes its own begin-of-sequence marker, so
    the tokenizer adds special tokens only to the plain layout (never a second BOS); a
    :class:`RawPrompt` is BOS + its tokens. ``max_tokens`` keeps the last that many ids (the original cut
    long prompts from the left); None keeps them all."""
    if isinstance(user_text, RawPrompt):
        ids = raw_prompt_ids(tokenizer, user_text)
    else:
        text = to_model_input(tokenizer, user_text)
        ids = list(tokenizer(text, add_special_tokens=not has_chat_template(tokenizer))["input_ids"])
    return ids if max_tokens is None or len(ids) <= max_tokens else ids[-max_tokens:]
