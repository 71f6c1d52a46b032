"""Fixtures shared across test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def embedded_model(tmp_path_factory):
    """SmolLM2-135M-Instruct from its PyPI wheel as a plain HF directory (materialised once per run)."""
    from spag.base_model import materialize_base_model

    return materialize_base_model(tmp_path_factory.mktemp("base") / "smollm2")


# The fast tier, `pytest -m "not slow"` (the edit-test loop), leaves out what loads the embedded model,
# starts vLLM or DeepSpeed or runs the pipeline under DVC: these modules and every test that uses the
# `embedded_model` fixture; tests of other modules that take seconds (subprocesses, several training
# runs) carry @pytest.mark.slow themselves. CI runs everything (`make test`).
SLOW_MODULES = {"test_pipeline", "test_deepspeed", "test_player_contract", "test_base_model"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        if module in SLOW_MODULES or "embedded_model" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
