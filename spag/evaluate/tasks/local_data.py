"""The local suite's dataset loader, named by ``custom_dataset`` in ``_default.yaml``.

lm-eval hands a task's ``data_files`` to ``datasets.load_dataset``, which reads relative paths against
the caller's working directory; here they are read against this folder, so the suite runs from anywhere.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(data_files: dict, cache_dir: str | None = None, **_metadata):
    """The task's splits from its JSON-lines files (paths relative to this folder). lm-eval passes the
    task's ``dataset_kwargs`` and ``metadata`` as keywords; ``cache_dir`` keeps the prepared data apart."""
    import datasets

    files = {split: str(HERE / path) for split, path in data_files.items()}
    missing = [path for path in files.values() if not Path(path).exists()]
    if missing:
        raise FileNotFoundError(f"{missing[0]} is missing (run python -m spag.evaluate.tasks.generate)")
    return datasets.load_dataset("json", data_files=files, cache_dir=cache_dir)
