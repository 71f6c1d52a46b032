"""The process around a DeepSpeed run: fixes of its environment that change nothing it computes.

:func:`prepare_deepspeed` runs before the core's run builds its Trainer (:mod:`spag.harness.training`, which
every command, stage and launched job calls): this environment's ninja first on PATH, py-cpuinfo asked once,
DeepSpeed's deprecation warnings quieted, and on a CPU the processes joined over gloo. It is harness, not
core: editing it re-runs no training stage.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from pathlib import Path

from spag.models.devices import free_port


def prepare_deepspeed(on_cpu: bool) -> None:
    """Everything a DeepSpeed run needs of its process; ``on_cpu``: DeepSpeed on the CPU, its processes joined
    here (see :func:`deepspeed_processes_on_cpu`)."""
    environment_ninja_first()
    quiet_deprecated_collectives()
    cpu_info_read_once()
    if on_cpu:
        deepspeed_processes_on_cpu()


def environment_ninja_first() -> None:
    """Build DeepSpeed's ops (torch compiles them on first use, with the ``ninja`` found on PATH) with this
    environment's ninja wherever the process was started from.

    A virtual environment has its own ninja (a dependency of DeepSpeed) that is on PATH only when the
    environment is activated, and a machine often has another one. Versions of ninja record a build's
    command differently, so each change of ninja counts as a new command and rebuilds every op: a process
    started with ``.venv/bin/python`` and one under an activated environment (``dvc repro``, ``torchrun``)
    would compile cpu_adam and the shared-memory op again by turns, a minute or more each time.
    """
    folder = Path(sys.executable).parent
    if (folder / "ninja").is_file():
        path = os.environ.get("PATH", "")
        if path.split(os.pathsep)[0] != str(folder):
            os.environ["PATH"] = os.pathsep.join([str(folder), path]) if path else str(folder)


def cpu_info_read_once() -> None:
    """py-cpuinfo's answer kept for the rest of the process.

    DeepSpeed asks py-cpuinfo about the CPU each time it loads an op (its architecture, its SIMD width, and
    the CPU Adam once more: five times in a ZeRO-3 process on a CPU), and py-cpuinfo answers by starting
    a new Python process, about a second of CPU each time. The CPU does not
    change while a process runs; each caller gets its own copy of the answer."""
    import cpuinfo

    if hasattr(cpuinfo.get_cpu_info, "__wrapped__"):
        return
    read = functools.cache(cpuinfo.get_cpu_info)
    cpuinfo.get_cpu_info = functools.wraps(read.__wrapped__)(lambda: dict(read()))


def quiet_deprecated_collectives() -> None:
    """DeepSpeed 0.19 gathers and scatters ZeRO-3's shards with ``all_gather_into_tensor`` and
    ``reduce_scatter_tensor``, which torch 2.13 deprecates; the warning came again at every call, two lines
    each, 884 in a toy online run, and buried whatever a failing process printed."""
    warnings.filterwarnings(
        "ignore",
        r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is "
        "deprecated",
        FutureWarning,
    )


def deepspeed_processes_on_cpu() -> None:
    """DeepSpeed without a GPU: its CPU accelerator, the processes joined over gloo.

    accelerate joins DeepSpeed's processes only on an accelerator device; with none it falls back to a single
    process, so each process would train alone. The processes are joined here instead, and the Trainer's
    arguments take this state as it is (``use_configured_state``).
    """
    from accelerate import PartialState

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if "LOCAL_RANK" not in os.environ:  # not under a launcher: a world of one process
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    PartialState(backend="gloo")
