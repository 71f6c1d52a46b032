"""Fixtures shared across test modules."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Property tests check results, not speed: on a loaded 2-core machine one example can pass hypothesis's
# default 200 ms deadline and fail a test that is correct.
settings.register_profile("spag", deadline=None)
settings.load_profile("spag")


@pytest.fixture(scope="session")
def embedded_model(tmp_path_factory):
    """SmolLM2-135M-Instruct from its PyPI wheel as a plain HF directory (materialised once per run)."""
    from spag.models.embedded import materialize_base_model

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


@pytest.fixture
def gpu_machine(tmp_path, monkeypatch):
    """Make this process look like a machine with NVIDIA GPUs: a fake nvidia-smi first on PATH and torch's
    CUDA answers patched. ``gpu_machine(gpus, memory_mib=..., driver=..., cuda_works=..., cuda_build=...)``."""
    import torch

    from spag.models import devices
    from spag.testing import fake_nvidia_smi

    def simulate(gpus: int = 1, *, cuda_works: bool = True, cuda_build: str | None = "13.0", **nvidia_smi):
        fake_nvidia_smi(tmp_path / "fake-bin", gpus, **nvidia_smi)
        monkeypatch.setenv("PATH", f"{tmp_path / 'fake-bin'}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr(torch.version, "cuda", cuda_build)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_works and gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus if cuda_works else 0)
        devices.nvidia_gpus.cache_clear()

    yield simulate
    devices.nvidia_gpus.cache_clear()


@pytest.fixture(autouse=True)
def no_process_group_left_behind():
    """A test leaves neither a process group nor environment variables to the tests after it: their
    subprocesses would inherit them. TRL's colocated vLLM engine starts a group on port 29500 and sets
    RANK and WORLD_SIZE (a later torchrun's workers would try to join it); vLLM's CPU platform sets
    LOCAL_WORLD_SIZE and its own settings for the engines it starts."""
    import sys

    saved = dict(os.environ)
    yield
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    os.environ.update(saved)
    if "vllm.distributed" in sys.modules:  # vLLM's own groups first (they sit on torch's)
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
