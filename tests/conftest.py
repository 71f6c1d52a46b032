"""Fixtures shared across test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def embedded_model(tmp_path_factory):
    """SmolLM2-135M-Instruct from its PyPI wheel as a plain HF directory (materialised once per run)."""
    from spag.base_model import materialize_base_model

    return materialize_base_model(tmp_path_factory.mktemp("base") / "smollm2")
