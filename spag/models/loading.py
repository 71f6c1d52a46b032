"""Loading models and tokenizers the same way everywhere.

Training and play must agree on the special tokens: a reproduction of the original got empty replies
after imitation learning because the trainer padded with one token and the player stopped on another.
:func:`setup_special_tokens` is the single place that decides pad and eos, and a checkpoint saved by this
project carries the decision in its tokenizer and generation config.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from spag.models.devices import cuda_unusable
from spag.runtime.atomic import followed, publish_folder
from spag.runtime.errors import DataError
from spag.schema import DEVICE_PATTERN


def pick_device(device: str | None = None) -> str:
    """``device`` itself, or the best there is for None/"auto"; DataError for a name that is no device
    (``gpu0``) or a GPU this machine lacks.

    A machine whose driver reports GPUs that torch cannot use (a driver older than torch's CUDA build, a
    CPU build of torch) is refused rather than run on the CPU: a 7B model would otherwise train for days
    on DeepSpeed's CPU path without a word. ``cpu`` asked for by name, or every GPU hidden on purpose
    (``CUDA_VISIBLE_DEVICES=``), runs on the CPU.
    """
    import torch

    if device and not re.match(DEVICE_PATTERN, device):
        raise DataError("--device", None, f"{device!r} is not a device (cpu, cuda, cuda:N or auto)")
    if device and device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise DataError("--device", None, f"{device}: no CUDA GPU is available here (use cpu)")
        return device
    if torch.cuda.is_available():
        return "cuda"
    reason = cuda_unusable()
    if reason:
        raise DataError("--device", None, reason)
    return "cpu"


def setup_special_tokens(tokenizer, model=None):
    """Give the tokenizer a pad token (the eos token when it has none) and align the model's configs.

    Padding is always masked by attention masks and label masks built from lengths, never by comparing
    ids with pad, so using eos as pad never hides the eos that ends a reply.
    """
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has no eos token: replies could never end")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
        model.config.eos_token_id = tokenizer.eos_token_id
        gen = getattr(model, "generation_config", None)
        if gen is not None:
            gen.pad_token_id = tokenizer.pad_token_id
            gen.eos_token_id = tokenizer.eos_token_id
    return tokenizer


# What a tokenizer is read from (one is enough): a fast tokenizer's tokenizer.json, a SentencePiece model
# (tokenizer.model, spiece.model), a BPE or WordPiece vocabulary (vocab.json with merges.txt, vocab.txt),
# tiktoken's or Mistral's file.
TOKENIZER_FILES = ("tokenizer.json", "*.model", "vocab.json", "vocab.txt", "*.tiktoken", "tekken.json")


def missing_tokenizer(model: str | os.PathLike) -> str | None:
    """What a local model directory (one with ``config.json``) lacks to give its tokenizer, said for the
    user; None when it has tokenizer files, or is no such directory (an id, an adapter: the loader's)."""
    path = Path(str(model)).expanduser()
    if not (path / "config.json").is_file() or any(next(path.glob(p), None) for p in TOKENIZER_FILES):
        return None
    return (
        "has no tokenizer files (tokenizer.json, tokenizer.model, vocab.json, ...): copy them from the model "
        "it was made from"
    )


def load_tokenizer(name_or_path: str | os.PathLike, trust_remote_code: bool = False):
    lacking = missing_tokenizer(name_or_path)
    if lacking:  # transformers would advise installing sentencepiece, naming no folder
        raise DataError(name_or_path, None, lacking)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path), trust_remote_code=trust_remote_code)
    return setup_special_tokens(tokenizer)


def bf16_by_default(device: str) -> bool:
    """Whether ``auto`` (``dtype``) and ``null`` (``bf16``) mean bfloat16 on ``device``: on a CUDA GPU that
    supports it, never on a CPU.

    On a CPU, even one with native bfloat16, the default is float32. At laptop scale a SPAG epoch moves most
    weights by less than bfloat16's resolution, so a trained model cast to bfloat16 for play and evaluation is
    mostly the model it started from (docs/experiments.md). Float32 on every CPU also gives an AVX2 machine and
    an AVX-512 machine the same computation. bfloat16 stays a choice (``dtype: bfloat16``, ``bf16: true``): it
    is emulated, and much slower than float32, without AVX512-BF16 or AMX, and faster with AMX. Which of them
    a CPU has is in ``provenance``.
    """
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return False


def set_tf32(enabled: bool) -> None:
    """TF32 for float32 matrix products on CUDA, on or off: the one place spag sets it.

    Through torch's fp32_precision settings (``torch.backends.cuda.matmul.fp32_precision``), never the
    older ``allow_tf32`` flags; the Trainer is not asked to set it a second way (transformers sets the
    generic ``torch.backends.fp32_precision``). torch 2.13 still reads the matmul precision through its older
    getter in places (torch.compile's autotune cache calls ``torch.get_float32_matmul_precision``), which
    raises "mix of the legacy and new APIs" unless it agrees: it is set to the same value ("high" is TF32,
    "highest" full float32). Convolutions (cuDNN) are left as they are: the models here have none.
    """
    import torch

    torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
    torch.set_float32_matmul_precision("high" if enabled else "highest")


def resolve_dtype(dtype: str | None, device: str) -> str:
    """The dtype name that ``dtype`` means on ``device``: ``None``/``"auto"`` is bfloat16 on a GPU that has
    it (:func:`bf16_by_default`), else float32; any other name is itself. Every backend resolves ``auto`` here."""
    if dtype in (None, "auto"):
        return "bfloat16" if bf16_by_default(device) else "float32"
    return dtype


def load_model(
    name_or_path: str | os.PathLike,
    device: str | None = None,
    dtype: str | None = None,
    trust_remote_code: bool = False,
):
    """(model, tokenizer) in eval mode on ``device``.

    ``dtype`` None or ``"auto"``: bfloat16 on a GPU that has it (:func:`bf16_by_default`), else float32.
    """
    import torch
    from transformers import AutoModelForCausalLM

    device = pick_device(device)
    torch_dtype = getattr(torch, resolve_dtype(dtype, device))
    tokenizer = load_tokenizer(name_or_path, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        str(name_or_path), dtype=torch_dtype, trust_remote_code=trust_remote_code
    )
    model.to(device)
    model.eval()
    setup_special_tokens(tokenizer, model)
    return model, tokenizer


def save_checkpoint(model, tokenizer, output_dir: str | os.PathLike) -> Path:
    """Save a plain HF directory (safetensors, tokenizer, chat template), atomically: written to a
    temporary sibling directory first and moved into place whole (:func:`spag.runtime.atomic.publish_folder`),
    so a half-written checkpoint never looks finished."""
    out = followed(output_dir)
    tmp = out.parent / f".{out.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    setup_special_tokens(tokenizer, model)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    usual_modes(tmp)
    return publish_folder(tmp, out)


def usual_modes(folder: str | os.PathLike) -> None:
    """Give every file in ``folder`` the mode a new file gets here (the umask's), as other tools' files
    have: safetensors writes its weights readable by their owner alone (0600)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in Path(folder).rglob("*"):
        if path.is_file():
            os.chmod(path, 0o666 & ~umask)


def tiny_llama(
    tokenizer,
    seed: int = 0,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    tie_word_embeddings: bool = True,
    family: str = "llama",
):
    """A small randomly initialised Llama sized to ``tokenizer``: for tests and benchmarks, no download.

    ``heads`` attention heads (half as many key/value heads, at least one); vLLM's CPU attention needs a
    head size (``hidden_size / heads``) of at least 32. ``family``: ``llama``, or ``qwen2`` for Qwen2's
    layout (Qwen2.5's models: biases on the query, key and value projections).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    families = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
    if family not in families:
        raise ValueError(f"family: {family!r} is not one of {', '.join(families)}")
    config_class, model_class = families[family]
    torch.manual_seed(seed)
    config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=tie_word_embeddings,
    )
    model = model_class(config)
    model.eval()
    return model


def written_as_path(name: str) -> bool:
    """Whether a model name can only be a local path: it starts with ``/``, ``./``, ``../`` or ``~``."""
    return name.startswith(("/", "./", "../", "~"))


def check_model(
    name: str | os.PathLike, option: str, trust_remote_code: bool | None = False, tokenizer: bool = True
) -> None:
    """Fail early, in one line naming ``option``, on a model path that cannot be loaded.

    A name that exists on disk, or is written as a path (:func:`written_as_path`), must be a model
    directory (with ``config.json``, or ``adapter_config.json`` for LoRA adapters); anything else is left
    to the backend as a model id. Unless ``trust_remote_code``, a model whose architecture only its own
    code defines (``auto_map``, a model type transformers does not know) is refused too: False for a command
    with a --trust-remote-code option (the message suggests it), None for one that never runs such code.
    A model directory lacking tokenizer files is refused too, unless ``tokenizer`` is false (a reference
    model, whose tokenizer is never read).
    """
    text = str(name)
    path = Path(text).expanduser()
    if not path.exists():
        if written_as_path(text):
            raise DataError(text, None, f"no such model directory (given to {option})")
        return
    if not path.is_dir() or not any((path / f).is_file() for f in ("config.json", "adapter_config.json")):
        raise DataError(text, None, f"is not a model directory: no config.json (given to {option})")
    lacking = missing_tokenizer(path) if tokenizer else None
    if lacking:
        raise DataError(text, None, f"{lacking} (given to {option})")
    if not trust_remote_code and (path / "config.json").is_file():
        from transformers import CONFIG_MAPPING

        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # the loader names a broken config
        if (
            isinstance(config, dict)
            and config.get("auto_map")
            and config.get("model_type") not in CONFIG_MAPPING
        ):
            remedy = (
                "pass --trust-remote-code to run it, only for code you trust"
                if trust_remote_code is False
                else "this command does not run a model's own code"
            )
            raise DataError(
                path / "config.json",
                None,
                f"model type {config.get('model_type')!r} is defined by "
                f"the model's own code: {remedy} (given to {option})",
            )
