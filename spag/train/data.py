"""Training rows to token ids, and token ids to padded batches.

A row's model input is ``to_model_input(tokenizer, prompt)`` followed by the completion and the
tokenizer's eos; the loss sees only the completion and that eos. A row with ``raw_prompt`` true (the
original project's formats, whose query already is the whole input) skips ``to_model_input``: it is
BOS + the prompt's tokens (:func:`spag.game.prompts.raw_prompt_ids`), as the original's collator built
it. The prompt and the completion are tokenised separately, as at play time, where the model's reply
starts right after the prompt's tokens.

A row longer than ``max_length`` is shortened by ``truncation``:

- ``history``: it gives up the OLDEST lines of its game history first (a game row carries
  ``history_bounds``, where those lines lie in its prompt), so the rules, the attacker's target word, the
  latest lines and the turn line always stay; the completion is never cut. A row that still does not fit
  (or has no history to give up: a general SFT row, a raw prompt) is left out rather than cut into
  something the model should not learn;
- ``left``: the original's: the whole sequence keeps its last ``max_length`` tokens (the rules and BOS go
  first; a completion longer than that loses its own beginning).

:class:`EncodedRows` counts what was shortened or left out, so the caller can say so.

Batches are padded on the LEFT with explicit position ids, so every completion ends at the last column
and the model can be asked for the logits of the last few positions only (``logits_to_keep``): the
vocabulary projection and log-softmax then run on the replies, not on the long prompts.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from spag.models.chat import has_chat_template, raw_prompt_ids, to_model_input
from spag.rewards.rows import GAME, drop_history_lines
from spag.runtime.console import progress
from spag.runtime.errors import DataError


def check_rows_for_method(rows: Sequence[Mapping], method: str, source: str | os.PathLike) -> None:
    """SPAG needs a reward on every game row; imitation uses every row as a target."""
    if method == "offline-po":
        for i, row in enumerate(rows):
            if row["kind"] == GAME and row["reward"] is None:
                raise DataError(source, i, "game row without a reward (offline-po needs one)")


def empty_completions(rows: Sequence[Mapping], source: str | os.PathLike) -> str | None:
    """A warning when rows have an empty completion (None when none has): each is still learned, as an end
    of the turn right after its prompt, which is rarely what was meant (spag reward and imitation-data leave
    out empty replies unless asked to keep them)."""
    empty = [i for i, row in enumerate(rows) if not str(row["completion"]).strip()]
    if not empty:
        return None
    return (
        f"warning: {source}: {len(empty)} of {len(rows)} rows have an empty completion (the first: record "
        f"{empty[0]}); each is learned as ending the turn at once"
    )


# ------------------------------------------------------------------------------------------ encoding


def prompt_adds_special_tokens(tokenizer) -> bool:
    """A chat template writes its own special tokens; the plain layout gets the tokenizer's (e.g. BOS)."""
    return not has_chat_template(tokenizer)


@dataclass
class EncodedRows:
    """Token ids of every row and where its completion starts, plus per-row numbers for the loss."""

    input_ids: list[list[int]]
    completion_lengths: list[int]
    weights: list[float]
    rewards: list[float]
    is_game: list[bool]
    max_length: int
    prompts_shortened: int = 0  # rows that gave up their oldest history lines to fit
    history_lines_dropped: int = 0
    rows_too_long: int = 0  # rows left out: too long even without their history
    rows_cut_left: int = 0  # truncation "left": rows that lost their first tokens
    ref_logprobs: list[float] | None = field(default=None)

    def __len__(self) -> int:
        return len(self.input_ids)

    def fingerprint(self) -> str:
        """sha256 of the exact token sequences and completion boundaries: what the reference sees."""
        digest = hashlib.sha256()
        for ids, n in zip(self.input_ids, self.completion_lengths):
            digest.update(np.asarray(ids, dtype=np.int64).tobytes())
            digest.update(np.asarray([-1, n, -1], dtype=np.int64).tobytes())
        return digest.hexdigest()


def _shortened_prompt(
    row: Mapping, tokenizer, add_special: bool, budget: int
) -> tuple[list[int], int] | None:
    """The row's prompt ids without its fewest oldest history lines that fit ``budget`` tokens, and how
    many lines went; None when even the whole history's absence is not enough, or the row has none."""
    bounds = row.get("history_bounds")
    if not bounds or row.get("raw_prompt") or budget < 1:
        return None
    for k in range(1, len(bounds)):
        text = to_model_input(tokenizer, drop_history_lines(row["prompt"], bounds, k))
        ids = tokenizer(text, add_special_tokens=add_special)["input_ids"]
        if len(ids) <= budget:
            return list(ids), k
    return None


def _prompt_ids(rows: Sequence[Mapping], tokenizer, add_special: bool) -> list[list[int]]:
    """Token ids of each row's model input: rendered prompts in one call, raw prompts in another."""
    ids: list[list[int] | None] = [None] * len(rows)
    for raw in (False, True):
        picked = [i for i, row in enumerate(rows) if bool(row.get("raw_prompt")) == raw]
        if not picked:
            continue
        if raw:
            for i in picked:
                ids[i] = raw_prompt_ids(tokenizer, rows[i]["prompt"])
            continue
        texts = [to_model_input(tokenizer, rows[i]["prompt"]) for i in picked]
        for i, row_ids in zip(picked, tokenizer(texts, add_special_tokens=add_special)["input_ids"]):
            ids[i] = row_ids
    return ids


def encode_rows(
    rows: Sequence[Mapping],
    tokenizer,
    max_length: int,
    batch_size: int = 512,
    show_progress: bool = True,
    truncation: str = "history",
) -> EncodedRows:
    """Tokenise rows the way training and the reference pass both see them (``truncation``: see the
    module docstring)."""
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token")
    if max_length < 2:
        raise ValueError("max_length must be at least 2")
    eos = tokenizer.eos_token_id
    add_special = prompt_adds_special_tokens(tokenizer)
    out = EncodedRows([], [], [], [], [], max_length)
    bar = progress(total=len(rows), desc="tokenising", unit="row", disable=not show_progress)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        prompt_ids = _prompt_ids(chunk, tokenizer, add_special)
        completion_ids = tokenizer([row["completion"] for row in chunk], add_special_tokens=False)[
            "input_ids"
        ]
        for row, p_ids, c_ids in zip(chunk, prompt_ids, completion_ids):
            c_ids = list(c_ids) + [eos]
            p_ids = list(p_ids)
            if len(p_ids) + len(c_ids) > max_length and truncation == "left":
                out.rows_cut_left += 1
                cut = len(p_ids) + len(c_ids) - max_length
                p_ids, c_ids = p_ids[cut:], c_ids[max(0, cut - len(p_ids)) :]
            elif len(p_ids) + len(c_ids) > max_length:
                shortened = _shortened_prompt(row, tokenizer, add_special, max_length - len(c_ids))
                if shortened is None:
                    out.rows_too_long += 1
                    continue
                p_ids, dropped = shortened
                out.prompts_shortened += 1
                out.history_lines_dropped += dropped
            out.input_ids.append(p_ids + c_ids)
            out.completion_lengths.append(len(c_ids))
            out.weights.append(float(row["weight"]))
            out.rewards.append(float(row["reward"] or 0.0))
            out.is_game.append(row["kind"] == GAME)
        bar.update(len(chunk))
    bar.close()
    return out


# ------------------------------------------------------------------------------------------ batches


class RowDataset:
    """Indexable view of :class:`EncodedRows` that the HF Trainer's sampler and collator understand."""

    def __init__(self, encoded: EncodedRows):
        self.encoded = encoded

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, i: int) -> dict:
        e = self.encoded
        item = {
            "input_ids": e.input_ids[i],
            "completion_length": e.completion_lengths[i],
            "weight": e.weights[i],
            "reward": e.rewards[i],
            "is_game": e.is_game[i],
        }
        if e.ref_logprobs is not None:
            item["ref_logp"] = e.ref_logprobs[i]
        return item


def collate(items: Sequence[Mapping], pad_token_id: int, padding_free: bool = False) -> dict:
    """Left-pad a list of rows into tensors.

    ``attention_mask`` and ``completion_mask`` are built from lengths, never by comparing ids with the pad
    id (pad may equal eos). ``logits_to_keep`` is the number of trailing positions whose logits the loss
    needs: the longest completion plus the position just before it.

    ``padding_free`` adds the same rows laid end to end (:func:`pack_rows`), which the forward pass then
    takes instead (:func:`spag.train.reference.model_forward_logprobs`).
    """
    import torch

    width = max(len(item["input_ids"]) for item in items)
    batch = len(items)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width), dtype=torch.long)
    completion_mask = torch.zeros((batch, width), dtype=torch.long)
    for row, item in enumerate(items):
        ids = item["input_ids"]
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, width - len(ids) :] = 1
        completion_mask[row, width - item["completion_length"] :] = 1
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    out = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "completion_mask": completion_mask,
        "logits_to_keep": min(width, max(item["completion_length"] for item in items) + 1),
        "weight": torch.tensor([float(item["weight"]) for item in items], dtype=torch.float32),
        "reward": torch.tensor([float(item["reward"]) for item in items], dtype=torch.float32),
        "is_game": torch.tensor([bool(item["is_game"]) for item in items], dtype=torch.bool),
    }
    if all("ref_logp" in item for item in items):
        out["ref_logp"] = torch.tensor([float(item["ref_logp"]) for item in items], dtype=torch.float32)
    if padding_free:
        out.update(pack_rows(items))
    return out


def pack_rows(items: Sequence[Mapping]) -> dict:
    """A batch's rows as one sequence without padding, laid out on the host (the forward pass reads
    nothing back from the device):

    - ``packed_ids``, ``packed_positions``: ``[1, T]``, the rows end to end, each row's positions from 0
      (how transformers tells packed rows apart: its attention then keeps each row to itself);
    - ``packed_keep``: the positions whose logits predict a completion token (each completion token but
      none of the prompts');
    - ``packed_rows``: the row of each kept position, and ``packed_counts`` each row's completion tokens.
    """
    import torch

    ids, positions, keep, rows, counts = [], [], [], [], []
    for row, item in enumerate(items):
        start, n = len(ids), len(item["input_ids"])
        predicted = min(item["completion_length"], n - 1)  # a row's first token has nothing before it
        ids += item["input_ids"]
        positions += range(n)
        keep += range(start + n - predicted - 1, start + n - 1)
        rows += [row] * predicted
        counts.append(predicted)
    return {
        "packed_ids": torch.tensor([ids], dtype=torch.long),
        "packed_positions": torch.tensor([positions], dtype=torch.long),
        "packed_keep": torch.tensor(keep, dtype=torch.long),
        "packed_rows": torch.tensor(rows, dtype=torch.long),
        "packed_counts": torch.tensor(counts, dtype=torch.float32),
    }


class Collator:
    """Picklable collate function bound to a pad id and the layout (for DataLoader workers)."""

    def __init__(self, pad_token_id: int, padding_free: bool = False):
        self.pad_token_id, self.padding_free = pad_token_id, padding_free

    def __call__(self, items: Sequence[Mapping]) -> dict:
        return collate(items, self.pad_token_id, self.padding_free)
