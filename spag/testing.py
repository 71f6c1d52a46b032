"""Tiny real models built in-process, for tests and benchmarks: no download, seconds on a CPU."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|start|>{{ message['role'] }}\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)


def _training_text() -> list[str]:
    from spag.game.prompts import TRAINING_TEMPLATES, build_prompt

    history = [
        {"role": "attacker", "content": "What do you drink in the morning to wake up?"},
        {"role": "defender", "content": "Usually a hot cup of tea. I know the word! It is coffee"},
    ]
    text = [build_prompt(role, "coffee", history, 5, t) for t in TRAINING_TEMPLATES for role in
            ("attacker", "defender")]
    text += ["the quick brown fox jumps over the lazy dog " * 4, "question answer true false yes no"]
    return text


def build_tiny_tokenizer(vocab_size: int = 512, chat_template: bool = True):
    """A byte-level BPE tokenizer trained on the game's own prompt text, with eos and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|pad|>", "<|start|>", "<|end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(_training_text(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|end|>", bos_token="<|start|>", pad_token="<|pad|>"
    )
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_tiny_checkpoint(output_dir: str | os.PathLike, seed: int = 0, hidden_size: int = 64,
                         layers: int = 2, chat_template: bool = True) -> Path:
    """Save a tiny random Llama with its tokenizer as a plain HF directory and return its path."""
    from spag.modeling import save_checkpoint, tiny_llama

    tokenizer = build_tiny_tokenizer(chat_template=chat_template)
    model = tiny_llama(tokenizer, seed=seed, hidden_size=hidden_size, layers=layers)
    return save_checkpoint(model, tokenizer, output_dir)


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_cli(*args) -> CliResult:
    """Run ``spag ARGS`` in this process (as ``python -m spag.cli`` would) and capture its output."""
    import contextlib
    import io

    from spag.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())
