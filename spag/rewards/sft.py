"""General instruction data: the SFT term's rows (the paper mixes in Alpaca), read from any of the
accepted record shapes, or the small built-in set shipped with the package (``"builtin"``).

Accepted shapes: Alpaca (``instruction``, optional ``input``, ``output``), ``prompt``/``completion``, and the
original project's ``query``/``target``. Rows are training rows (:mod:`spag.rewards.rows`) of kind ``sft``.

Two formats (``sft_format``): ``chat`` makes each record a user message (Alpaca's instruction and input
joined by a blank line) that training wraps in the model's chat template, and leaves out records without
an output; ``original`` does what the original project did: Alpaca in Stanford Alpaca's prompt template,
other records' prompts as they are, each the model's whole input (``raw_prompt``), every record kept.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import Path

from spag.models.chat import RawPrompt
from spag.rewards.rows import SFT, make_row
from spag.runtime.errors import DataError, collect_or_raise
from spag.runtime.records import read_records

# Stanford Alpaca's prompt template (tatsu-lab/stanford_alpaca, train.py), which the original's data notes
# say to apply to Alpaca's instruction and input; the output is the target.
ALPACA_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n### Instruction:\n"
    "{instruction}\n\n### Input:\n{input}\n\n### Response:"
)
ALPACA_WITHOUT_INPUT = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:"
)


def alpaca_prompt(instruction: str, extra: str) -> RawPrompt:
    """An Alpaca record's prompt in Stanford Alpaca's template (``extra`` is the record's input)."""
    if extra:
        return RawPrompt(ALPACA_WITH_INPUT.format(instruction=instruction, input=extra))
    return RawPrompt(ALPACA_WITHOUT_INPUT.format(instruction=instruction))


BUILTIN = "builtin"


def prompt_completion(record: Mapping, index: int, source: str, sft_format: str = "chat") -> tuple[str, str]:
    """The (prompt, completion) of an instruction record in any of the accepted shapes; with
    ``sft_format="original"`` the prompt is a RawPrompt and an empty completion is kept."""
    original = sft_format == "original"
    if "instruction" in record:  # Alpaca: instruction, optional input, output
        instruction, extra, output = (
            record.get("instruction"),
            record.get("input") or "",
            record.get("output"),
        )
        if not isinstance(instruction, str) or not instruction.strip():
            raise DataError(source, index, "missing or empty 'instruction'")
        if not isinstance(extra, str):
            raise DataError(source, index, "'input' is not a string")
        if original:
            prompt = alpaca_prompt(instruction, extra)
        else:
            prompt = instruction.strip() + ("\n\n" + extra.strip() if extra.strip() else "")
        completion = output
        name = "output"
    elif "prompt" in record or "completion" in record:
        prompt, completion, name = record.get("prompt"), record.get("completion"), "completion"
    elif "query" in record or "target" in record:
        prompt, completion, name = record.get("query"), record.get("target"), "target"
    else:
        raise DataError(
            source, index, "expected instruction/output, prompt/completion or query/target fields"
        )
    if not isinstance(prompt, str) or not prompt.strip():
        raise DataError(source, index, "missing or empty prompt")
    if original:
        if not isinstance(completion, str):
            raise DataError(source, index, f"missing '{name}' or not a string")
        return RawPrompt(prompt), completion
    if not isinstance(completion, str) or not completion.strip():
        raise DataError(source, index, f"missing or empty '{name}'")
    return prompt, completion.strip()


def sft_rows(
    records: Iterable[Mapping],
    source: str = "<sft>",
    errors: list[DataError] | None = None,
    sft_format: str = "chat",
) -> list[dict]:
    """General instruction rows: kind ``sft``, reward 0, weight 1, no role."""
    rows = []
    for index, record in enumerate(records):
        try:
            prompt, completion = prompt_completion(record, index, source, sft_format)
        except DataError as error:
            collect_or_raise(error, errors)
            continue
        rows.append(make_row(prompt, completion, kind=SFT, reward=0.0, weight=1.0))
    return rows


def builtin_sft_path() -> Path:
    """The small general instruction set shipped with the package, so the pipeline runs offline."""
    return Path(str(files("spag.rewards.data") / "general_sft.jsonl"))


def load_sft(
    source: str | os.PathLike,
    limit: int | None = None,
    seed: int = 0,
    errors: list[DataError] | None = None,
    sft_format: str = "chat",
) -> list[dict]:
    """General instruction rows from a file (Alpaca, prompt/completion or query/target) or ``"builtin"``,
    in ``sft_format`` (see the module docstring).

    With ``limit``, a seeded random sample of that many rows, in file order. Bad rows raise DataError
    unless an ``errors`` list is given to collect them.
    """
    path = builtin_sft_path() if str(source) == BUILTIN else Path(source)
    records = read_records(path)
    if not records:  # asked for general data and given none: a wrong file, not an empty mix
        raise DataError(path, None, "holds no rows (general instruction data was asked for)")
    rows = sft_rows(records, str(path), errors, sft_format)
    if limit is not None and 0 <= limit < len(rows):
        keep = sorted(random.Random(seed).sample(range(len(rows)), limit))
        rows = [rows[i] for i in keep]
    return rows
