"""Tiny real models built in-process, for tests and benchmarks: no download, seconds on a CPU."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from spag.cli import main
from spag.game.taboo.prompts import TRAINING_TEMPLATES, build_prompt
from spag.game.taboo.rules import judge
from spag.models.chat import model_input_ids
from spag.models.loading import save_checkpoint, tiny_llama

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|start|>{{ message['role'] }}\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)


def _training_text() -> list[str]:
    history = [
        {"role": "attacker", "content": "What do you drink in the morning to wake up?"},
        {"role": "defender", "content": "Usually a hot cup of tea. I know the word! It is coffee"},
    ]
    text = [
        build_prompt(role, "coffee", history, 5, t)
        for t in TRAINING_TEMPLATES
        for role in ("attacker", "defender")
    ]
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


def make_tiny_checkpoint(
    output_dir: str | os.PathLike,
    seed: int = 0,
    hidden_size: int = 64,
    layers: int = 2,
    chat_template: bool = True,
    heads: int = 4,
    family: str = "llama",
) -> Path:
    """Save a tiny random Llama (``family: qwen2``: Qwen2) with its tokenizer as a plain HF directory and
    return its path.

    vLLM needs ``hidden_size / heads`` >= 32 (its CPU attention kernels' smallest head size).
    """
    tokenizer = build_tiny_tokenizer(chat_template=chat_template)
    model = tiny_llama(
        tokenizer, seed=seed, hidden_size=hidden_size, layers=layers, heads=heads, family=family
    )
    return save_checkpoint(model, tokenizer, output_dir)


def make_scripted_checkpoint(
    output_dir: str | os.PathLike, script: str, *, loop: bool = False, seed: int = 0, hidden_size: int = 64
) -> Path:
    """A tiny Llama whose greedy reply to any game prompt is ``script``, then its end-of-turn token
    (``loop``: the script again and again, never ending). Saved as a plain HF directory.

    Its next token depends on the current token alone: attention and MLP write nothing into the
    residual stream (zero output projections), so the last layer sees the token's embedding, and the
    output layer holds a table of transitions: the prompt's last token -> the script's first token ->
    ... Every embedding shares one constant component, which the end-of-turn row reads as a fixed
    logit: below each scripted transition, above the rest, so any token outside the script (one forced
    by ``min_new_tokens``, say) is followed by the end of the turn. Being real weights, it makes both
    backends (hf and vLLM) write the same text, which is what the player contract tests need.
    """
    import torch

    tokenizer = build_tiny_tokenizer()
    # The reply starts after a special token, so that no text token of the script needs two successors.
    tokenizer.chat_template = CHAT_TEMPLATE.replace(
        "<|start|>assistant\n{% endif %}", "<|start|>assistant\n<|start|>{% endif %}"
    )
    model = tiny_llama(
        tokenizer,
        seed=seed,
        hidden_size=hidden_size,
        layers=1,
        heads=hidden_size // 32,
        tie_word_embeddings=False,
    )
    last = model_input_ids(tokenizer, build_prompt("attacker", "coffee", [], 3))[-1]
    ids = tokenizer(script, add_special_tokens=False)["input_ids"]
    chain = [last, *ids] + ([ids[0]] if loop and ids else [])
    transitions: dict[int, int] = {}
    for a, b in pairwise(chain):
        if transitions.setdefault(a, b) != b:
            raise ValueError(f"script {script!r}: token {tokenizer.decode([a])!r} would need two successors")

    generator = torch.Generator().manual_seed(seed)
    vocab, width = len(tokenizer), hidden_size
    shared = 0.5  # the constant component of every (unit-norm) embedding
    rest = torch.randn(vocab, width - 1, generator=generator)
    rest = rest / rest.norm(dim=1, keepdim=True)
    embeddings = torch.cat([torch.full((vocab, 1), shared), rest * (1 - shared**2) ** 0.5], dim=1)
    head = torch.zeros(vocab, width)
    for a, b in transitions.items():
        head[b, 1:] += 4.0 * rest[a]  # logit ~ 4 * sqrt(width) * 0.87 for the scripted successor
    head[tokenizer.eos_token_id, 0] = 4.0  # logit 4 * sqrt(width) * 0.5 for the end of the turn
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(embeddings)
        model.get_output_embeddings().weight.copy_(head)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
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
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())


def episode_ending(word: str, cause: str, max_turns: int = 2) -> dict:
    """A judged episode on ``word`` that ends the way ``cause`` names (``spag.game.taboo.outcomes.CAUSES``)."""
    clue = {"role": "attacker", "content": "It is something you can find in many places."}
    neutral = {"role": "defender", "content": "Tell me more about it."}
    endings = {
        "defender_said_word": [clue, {"role": "defender", "content": f"Maybe a {word}?"}],
        "wrong_guess": [clue, {"role": "defender", "content": "I know the word! It is zyzzyva."}],
        "correct_guess": [clue, {"role": "defender", "content": f"I know the word! It is {word}."}],
        "attacker_said_word": [{"role": "attacker", "content": f"Think of a {word}."}],
        "attacker_guessed": [{"role": "attacker", "content": "I know the word! It is fun."}],
        "out_of_turns": [clue, neutral] * max_turns,
    }
    history = endings[cause]
    verdict = judge(word, history, max_turns)
    assert verdict.cause == cause, (word, cause, verdict)
    return {
        "target_word": word,
        "max_turns": max_turns,
        "history": history,
        "outcome": verdict.outcome,
        "turns": verdict.turns,
    }


def fake_nvidia_smi(
    bin_dir: str | os.PathLike,
    gpus: int = 1,
    name: str = "NVIDIA A100-SXM4-40GB",
    memory_mib: int = 40960,
    driver: str = "580.95.05",
    fails: bool = False,
) -> Path:
    """An ``nvidia-smi`` in ``bin_dir`` that reports ``gpus`` GPUs as the real one answers spag's query
    (:mod:`spag.models.devices`), or fails as it does without a working driver: for simulating GPU machines."""
    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(
        f"{i}, GPU-{i:08x}-0000-0000-0000-000000000000, {name}, {memory_mib}, {driver}\\n"
        for i in range(gpus)
    )
    body = (
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2; exit 9"
        if fails
        else f"printf '{lines}'"
    )
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    tool.chmod(0o755)
    return tool


def launcher_failure(stderr: str, limit: int = 6000) -> str:
    """What a failed run under a launcher said that tells why: the workers' own last lines (an aborted
    worker's fault handler dump, a C++ ``what()``) ahead of the launcher's summary, then the summary's end.

    torchrun's summary and the pipeline's traceback fill the end of stderr; a plain tail hides what the
    worker that failed printed before them."""
    summary = stderr.find("torch.distributed.elastic.multiprocessing.errors.ChildFailedError")
    start = stderr.rfind("Traceback (most recent call last):", 0, summary) if summary >= 0 else -1
    workers = stderr[:start] if start >= 0 else ""
    said, after_warning = [], False
    for line in workers.splitlines():
        # a warning prints two lines, "FILE:LINE: CategoryWarning: text" and, indented, the source line it
        # points at (a ZeRO-3 run prints hundreds); the fault handler's list of extension modules (one line of
        # several thousand characters) tells nothing either
        quoted = after_warning and line.startswith("  ") and not line.startswith("  File ")
        after_warning = "Warning" in line
        if not (after_warning or quoted or not line.strip() or line.startswith("Extension modules:")):
            said.append(line)
    told = "\n".join(said)
    return f"{told[-limit:]}\n--- the launcher's end ---\n{stderr[-3000:]}"


def load_script(path: str | os.PathLike, name: str | None = None):
    """A script outside the package (``scripts/bandit.py``) imported as a module named ``name`` (the file's
    stem unless given), and registered in ``sys.modules`` so that its dataclasses and pickles resolve."""
    path = Path(path)
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
