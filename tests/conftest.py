"""Fixtures shared across test modules."""

from __future__ import annotations

import os

import pytest
from _pytest.nodeid import coerce_node_id
from hypothesis import settings

# Property tests check results, not speed: on a loaded 2-core machine one example can pass hypothesis's
# default 200 ms deadline and fail a test that is correct.
settings.register_profile("spag", deadline=None)
settings.load_profile("spag")


@pytest.fixture(scope="session")
def embedded_model(tmp_path_factory):
    """SmolLM2-135M-Instruct from its PyPI wheel as a plain HF directory, materialised once per run: the
    workers of `make test` share one copy (20 s of a core each), which the first to ask writes under a lock
    (atomically: a folder that is there is whole)."""
    from filelock import FileLock

    from spag.models.embedded import materialize_base_model

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's base folder sits in the run's
        shared = shared.parent
    path = shared / "embedded" / "smollm2"
    path.parent.mkdir(exist_ok=True)
    with FileLock(shared / "embedded.lock"):
        if not path.exists():
            materialize_base_model(path)
    return path


# The fast tier, `pytest -m "not slow"` (the edit-test loop), leaves out what loads the embedded model,
# starts vLLM or DeepSpeed or runs the pipeline under DVC: these modules and every test that uses the
# `embedded_model` fixture; tests of other modules that take seconds (subprocesses, several training
# runs) carry @pytest.mark.slow themselves. CI runs everything (`make test`).
SLOW_MODULES = {"test_pipeline", "test_deepspeed", "test_player_contract", "test_base_model"}

# `make test` runs the suite on two workers (pytest-xdist, `--dist loadgroup`). A test module runs on one
# worker as a whole, so that its module fixtures are built once, but for two groups:
# - "processes": the tests that start several training or playing processes (torchrun, DeepSpeed). Two of
#   them side by side put four busy processes on two cores, and gloo's collectives wait by spinning: each
#   ran several times slower. They take turns on one worker while the other runs the rest.
# - the pipeline tests that share one committed run (the `pipeline` fixture) run together; the other
#   pipeline tests, each a whole run of its own, go wherever a worker is free.
# The longest groups start first, so that both workers finish at about the same time.
PROCESSES = {
    "test_deepspeed": None,
    "test_play": {"test_two_ranks_under_torchrun_play_the_games_of_one_process_and_resume_a_killed_rank"},
    "test_devices": {"test_self_play_under_a_launcher_shares_the_words_by_rank"},
    "test_online": {"test_the_gpu_preset_trains_an_online_epoch_at_toy_size_under_zero3"},
    "test_train": {
        "test_two_processes_share_the_reference_pass_and_train_together",
        "test_a_steps_rows_are_summed_over_its_processes_for_each_micro_batchs_share",
    },
    "test_pipeline": {
        "test_training_stages_under_a_launcher_with_zero3_resume_when_killed",
        "test_the_paper_preset_runs_end_to_end_at_toy_size",
    },
}
FIRST = (
    "processes",
    "test_pipeline",
    "test_pipeline::test_the_one_gpu_preset_runs_end_to_end_at_toy_size",
    "test_benchmark_data",
    "test_player_contract",
    "test_online",
)
# The projects the tests `dvc init` send no usage report (the repository's own .dvc/config says so too):
# each dvc command would start a daemon process for it, 38 in the suite.
os.environ["DVC_NO_ANALYTICS"] = "1"
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers share the two cores: one thread each (and for the processes they start) keeps them from
    # taking the cores from each other.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _group(item, module: str) -> str:
    name = getattr(item, "originalname", item.name)
    if module in PROCESSES and (PROCESSES[module] is None or name in PROCESSES[module]):
        return "processes"
    if module == "test_pipeline" and "pipeline" not in item.fixturenames:
        return f"{module}::{name}"
    return module


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        if module in SLOW_MODULES or "embedded_model" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        groups[item] = _group(item, module)
        if config.getoption("loadgroup", False):
            # pytest-xdist 3.8 tells a worker's group by a "@group" suffix of the test's id, which it sets
            # on an attribute pytest 9 no longer reads: the suffix is set here, where pytest 9 keeps the id.
            item._id = coerce_node_id(f"{item.nodeid}@{groups[item]}")
    items.sort(key=lambda item: FIRST.index(groups[item]) if groups[item] in FIRST else len(FIRST))


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
