"""Which GPU each process and engine gets, simulated on a CPU: a fake nvidia-smi (the driver's view, what
spag asks before torch looks) and torch's CUDA answers patched (the ``gpu_machine`` fixture of conftest)."""

import os
import subprocess
import sys

import pytest

from spag.models import devices
from spag.models.loading import pick_device
from spag.play.engine import place_rank
from spag.runtime.errors import DataError


@pytest.fixture
def env(monkeypatch):
    """Set environment variables for one test; whatever the code under test sets in them is undone too."""

    def setenv(**values):
        for name, value in values.items():
            monkeypatch.setenv(name, "")  # recorded first, so a value the code writes later is undone as well
            if value is None:
                monkeypatch.delenv(name)
            else:
                monkeypatch.setenv(name, str(value))

    setenv(CUDA_VISIBLE_DEVICES=None, SPAG_PINNED_GPUS=None)
    return setenv


def launched(env, rank: int, world: int):
    env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=world, LOCAL_WORLD_SIZE=world)


# ------------------------------------------------------------------------------------------ the driver's view


def test_the_driver_reports_gpus_and_cuda_visible_devices_picks_and_orders_them(gpu_machine, env):
    gpu_machine(4, name="NVIDIA H100 80GB HBM3", memory_mib=81559, driver="580.95.05")
    gpus = devices.nvidia_gpus()
    assert [(g.index, g.name, g.memory_mib, g.driver) for g in gpus] == [
        (i, "NVIDIA H100 80GB HBM3", 81559, "580.95.05") for i in range(4)
    ]
    env(CUDA_VISIBLE_DEVICES="2,0")
    assert [g.index for g in devices.visible_gpus()] == [2, 0]
    env(CUDA_VISIBLE_DEVICES="1,7,2")  # CUDA stops at the first entry that names no GPU
    assert [g.index for g in devices.visible_gpus()] == [1]
    env(CUDA_VISIBLE_DEVICES=gpus[3].uuid[:12])  # a UUID prefix names a GPU as well
    assert [g.index for g in devices.visible_gpus()] == [3]
    env(CUDA_VISIBLE_DEVICES="")
    assert devices.visible_gpus() == [] and devices.gpus_hidden_on_purpose()


def test_no_driver_means_no_gpu(gpu_machine):
    gpu_machine(2, fails=True, cuda_works=False)  # nvidia-smi without a working driver; NVML has none either
    assert devices.nvidia_gpus() == ()
    assert devices.cuda_unusable() is None and pick_device(None) == "cpu"


# ------------------------------------------------------------------------------------------ F5: no silent CPU


def test_an_old_driver_is_refused_with_the_driver_it_needs_never_run_on_the_cpu(gpu_machine, env):
    gpu_machine(8, driver="535.104.05", cuda_works=False, cuda_build="13.0")
    with pytest.raises(DataError) as caught:
        pick_device(None)
    message = str(caught.value)
    assert "\n" not in message
    assert "nvidia-smi sees 8 GPUs (NVIDIA A100-SXM4-40GB, driver 535.104.05)" in message
    assert "built for CUDA 13.0, which needs driver >= 580.65.06: update the NVIDIA driver" in message
    assert pick_device("cpu") == "cpu"  # asked for by name
    env(CUDA_VISIBLE_DEVICES="")  # every GPU hidden on purpose
    assert pick_device(None) == "cpu"


def test_a_cpu_build_of_torch_on_a_gpu_machine_is_refused(gpu_machine):
    gpu_machine(1, cuda_works=False, cuda_build=None)
    reason = devices.cuda_unusable()
    assert "is a CPU build: install the GPU lock (LOCK=requirements/gpu.txt bash scripts/setup.sh)" in reason


def test_a_new_enough_driver_that_still_fails_says_so(gpu_machine):
    gpu_machine(1, driver="580.95.05", cuda_works=False, cuda_build="13.0")
    assert "cannot use them: check the driver" in devices.cuda_unusable()


def test_the_oldest_driver_of_each_cuda_build():
    assert devices.driver_too_old("575.57.08", "13.0") == "580.65.06"
    assert devices.driver_too_old("580.65.06", "13.0") is None
    assert devices.driver_too_old("535.104.05", "12.8") is None  # CUDA 12.x runs on 525.60.13 and newer
    assert devices.driver_too_old("520.61.05", "12.1") == "525.60.13"


# ------------------------------------------------------------------------------------------ launchers


@pytest.mark.parametrize(
    "launcher, gpus, per_process, resolved",
    [
        ("torchrun --standalone --nproc_per_node auto", 8, 1, "torchrun --standalone --nproc_per_node 8"),
        ("torchrun --standalone --nproc_per_node auto", 1, 1, "torchrun --standalone --nproc_per_node 1"),
        ("torchrun --standalone --nproc_per_node auto", 0, 1, "torchrun --standalone --nproc_per_node 1"),
        ("torchrun --standalone --nproc-per-node=auto", 8, 2, "torchrun --standalone --nproc-per-node=4"),
        ("accelerate launch --num_processes auto", 4, 1, "accelerate launch --num_processes 4"),
        (
            "torchrun --standalone --nproc_per_node 2",
            1,
            1,
            "torchrun --standalone --nproc_per_node 2",
        ),  # as set
    ],
)
def test_auto_means_one_process_per_visible_gpu(launcher, gpus, per_process, resolved):
    assert devices.resolve_launcher(launcher, gpus=gpus, per_process=per_process) == resolved


def test_auto_follows_the_visible_gpus(gpu_machine, env):
    gpu_machine(8)
    env(CUDA_VISIBLE_DEVICES="4,5,6")
    assert devices.resolve_launcher("torchrun --nproc_per_node auto") == "torchrun --nproc_per_node 3"


def test_process_counts_per_machine():
    assert devices.launcher_processes("torchrun --nnodes 2 --nproc_per_node 8").per_machine() == 8
    assert (
        devices.launcher_processes("accelerate launch --num_machines 2 --num_processes 16").per_machine() == 8
    )
    assert devices.launcher_processes("torchrun --nproc_per_node=auto").auto
    assert devices.launcher_processes("python -m mylauncher").per_machine() is None


# ------------------------------------------------------------------------------------------ F2: ranks


@pytest.mark.parametrize("world", [1, 2, 4])
def test_each_rank_of_the_hf_backend_gets_its_own_gpu(gpu_machine, env, world):
    gpu_machine(4)
    placed = []
    for rank in range(world):
        launched(env, rank, world)
        options = {"device": None}
        place_rank("hf", options)
        placed.append(options["device"])
    assert placed == (
        [None] if world == 1 else [f"cuda:{r}" for r in range(world)]
    )  # one process: "the best"


def test_an_hf_rank_without_a_gpu_of_its_own_is_refused():
    with pytest.raises(DataError, match="local rank 2 has no GPU of its own: 2 visible"):
        devices.hf_rank_device(2, 2)


@pytest.mark.parametrize(
    "visible, tensor_parallel, expected",
    [
        (None, 1, ["0", "1", "2", "3"]),
        (None, 2, ["0,1", "2,3"]),
        ("4,5,6,7", 1, ["4", "5", "6", "7"]),  # the user's own choice of GPUs, in its order
        ("6,7,4,5", 2, ["6,7", "4,5"]),
    ],
)
def test_each_rank_of_the_vllm_backend_is_pinned_to_its_gpus_before_vllm_starts(
    gpu_machine, env, visible, tensor_parallel, expected
):
    gpu_machine(8)
    pinned = []
    for rank in range(len(expected)):
        env(CUDA_VISIBLE_DEVICES=visible, SPAG_PINNED_GPUS=None)
        launched(env, rank, len(expected))
        options = {"tensor_parallel_size": tensor_parallel}
        place_rank("vllm", options)
        pinned.append(os.environ["CUDA_VISIBLE_DEVICES"])
        place_rank("vllm", options)  # the same rank's second engine keeps the pin
        assert os.environ["CUDA_VISIBLE_DEVICES"] == pinned[-1]
    assert pinned == expected


def test_a_vllm_rank_beyond_the_visible_gpus_is_refused_in_one_line(gpu_machine, env):
    gpu_machine(2)
    launched(env, 1, 2)
    with pytest.raises(DataError) as caught:
        place_rank("vllm", {"tensor_parallel_size": 2})
    assert str(caught.value) == (
        "--tensor-parallel-size: local rank 1 needs GPUs 2..3 of the 2 visible: start at "
        "most 1 processes per machine with tensor_parallel_size 2"
    )


def test_one_process_and_no_gpu_leave_the_engine_alone(gpu_machine, env):
    gpu_machine(0)
    launched(env, 0, 2)
    place_rank("vllm", {"tensor_parallel_size": 1})  # vLLM's CPU build: nothing to pin
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    gpu_machine(4)
    env(LOCAL_RANK=None, RANK=None, WORLD_SIZE=None, LOCAL_WORLD_SIZE=None)
    place_rank("vllm", {"tensor_parallel_size": 1})
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_the_pin_is_what_a_new_process_sees(gpu_machine, env):
    """The value pinned is what CUDA reads when the engine starts: a child process (vLLM's engine core) sees
    only this rank's GPU."""
    gpu_machine(4)
    launched(env, 3, 4)
    place_rank("vllm", {"tensor_parallel_size": 1})
    seen = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert seen == "3"


# ------------------------------------------------------------------------------------------ play under a launcher


@pytest.mark.slow
def test_self_play_under_a_launcher_shares_the_words_by_rank(tmp_path, capfd):
    """The play stage's launcher on a CPU (two ranks under torchrun, the hf backend): each rank writes its own
    shards, together the games of one process; a second run resumes them all; another seed plays them again."""
    import dataclasses

    from spag.game.episodes import read_episodes
    from spag.harness.play_job import play_under_launcher
    from spag.play.engine import PlayConfig, run_games
    from spag.testing import make_tiny_checkpoint

    model = str(make_tiny_checkpoint(tmp_path / "model"))
    words = ["apple", "river", "cloud", "horse", "table"]
    config = PlayConfig.of(max_turns=1, max_new_tokens=6, batch_size=4, seed=3)
    options = {"device": "cpu", "dtype": "float32"}  # what the hf backend takes
    alone = run_games(model, model, words, config, output=tmp_path / "alone", show_progress=False, **options)
    launcher = "torchrun --standalone --nproc_per_node 2"
    stats = play_under_launcher(launcher, model, words, config, "hf", options, tmp_path / "ranks")
    assert sorted(p.name for p in (tmp_path / "ranks").glob("*.parquet")) == [
        "shard-r0-00000.parquet",
        "shard-r1-00000.parquet",
    ]
    ranks = sorted(read_episodes(tmp_path / "ranks"), key=lambda e: e["word_index"])
    assert [e["history"] for e in ranks] == [e["history"] for e in alone]
    assert stats.games == 5 and sum(stats.outcomes.values()) == 5 and stats.provenance["players"]
    assert not list(tmp_path.glob(".ranks.play-job*"))  # the job and the ranks' counts are gone

    again = play_under_launcher(launcher, model, words, config, "hf", options, tmp_path / "ranks")
    assert again.games == 0 and again.resumed == 5
    capfd.readouterr()
    other = dataclasses.replace(config, seed=4)
    replayed = play_under_launcher(launcher, model, words, other, "hf", options, tmp_path / "ranks")
    assert replayed.games == 5 and "playing every game again" in capfd.readouterr().err
