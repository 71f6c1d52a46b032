"""Stage ``base_model``: the model SPAG starts from, as a plain HF directory.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from spag.config import Settings
from spag.harness.claims import claim_output_dir
from spag.harness.folders import MARKER
from spag.models.embedded import BASE_MODEL_KIND, materialize_base_model
from spag.models.loading import load_tokenizer, save_checkpoint
from spag.pipeline.context import Layout
from spag.runtime.atomic import publish_folder
from spag.runtime.console import summary


def base_model(settings: Settings, layout: Layout) -> None:
    """The model SPAG starts from, as a plain HF directory: every later stage depends on one directory.

    "embedded" materialises SmolLM2-135M-Instruct from its PyPI wheel; a local path is copied in; an HF id
    is loaded and saved.
    """
    source = settings.model.base
    target = layout.base_model
    claim_output_dir(target, BASE_MODEL_KIND, overwrite=True)
    if source == "embedded":
        materialize_base_model(target)
    elif Path(source).is_dir():
        tmp = target.parent / ".base_model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(
            source,
            tmp,
            ignore=shutil.ignore_patterns("checkpoint-*", "optimizer.pt", "*.bin.index.json.tmp", MARKER),
        )
        publish_folder(tmp, target)
    else:
        from transformers import AutoModelForCausalLM

        trust = settings.model.trust_remote_code
        model = AutoModelForCausalLM.from_pretrained(source, dtype="auto", trust_remote_code=trust)
        save_checkpoint(model, load_tokenizer(source, trust_remote_code=trust), target)
    summary("base_model", f"{source} -> {target}")
