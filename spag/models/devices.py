"""Which GPUs there are, which of them a process may use, and which one each rank gets.

The NVIDIA driver is asked through ``nvidia-smi`` (NVML when the tool is missing), never through torch:
torch fixes ``CUDA_VISIBLE_DEVICES`` the first time it touches CUDA, so a rank has to be pinned to its GPU
before torch (or vLLM) looks, and a machine whose torch cannot use its GPUs must still be seen as a GPU
machine (:mod:`spag.pipeline.preflight` refuses it instead of training on the CPU).

Launchers: a ``launcher`` setting (``torchrun --nproc_per_node N``, ``accelerate launch --num_processes N``)
may write ``auto`` for N: one process per visible GPU, or one on a machine without a GPU
(:func:`resolve_launcher`). Under a launcher, rank ``LOCAL_RANK`` plays or trains on the visible GPU of that
index (``cuda:LOCAL_RANK``, the hf backend and training), or on the ``tensor_parallel_size`` GPUs from
``LOCAL_RANK × tensor_parallel_size`` on (the vllm backend, pinned through ``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from spag.runtime.errors import DataError

AUTO = "auto"
# The launchers' process-count options: torchrun's (per node), accelerate's (in all, see --num_machines),
# deepspeed's launcher's (per node).
PROCESS_OPTIONS = (
    "--nproc_per_node",
    "--nproc-per-node",
    "--num_processes",
    "--num-processes",
    "--num_gpus",
    "--num-gpus",
)
MACHINE_OPTIONS = ("--num_machines", "--num-machines")
_SMI_FIELDS = "index,uuid,name,memory.total,driver_version"
_PINNED = "SPAG_PINNED_GPUS"  # what pin_rank_to_gpus set, so that a second call keeps it


@dataclass(frozen=True)
class Gpu:
    """One GPU as the NVIDIA driver reports it."""

    index: int
    uuid: str
    name: str
    memory_mib: int
    driver: str


def _from_nvidia_smi() -> list[Gpu] | None:
    """The GPUs ``nvidia-smi`` lists; None when there is no nvidia-smi or it cannot talk to a driver."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    gpus = []
    for line in done.stdout.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        memory = parts[3] if parts[3].isdigit() else "0"
        gpus.append(Gpu(int(parts[0]), parts[1], parts[2], int(memory), parts[4]))
    return gpus


def _from_nvml() -> list[Gpu] | None:
    """The GPUs NVML lists (``nvidia-ml-py``, in both locks); None without a driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except (
        pynvml.NVMLError
    ):  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...: no NVIDIA driver here
        return None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20
            gpus.append(
                Gpu(
                    index,
                    str(pynvml.nvmlDeviceGetUUID(handle)),
                    str(pynvml.nvmlDeviceGetName(handle)),
                    int(memory),
                    str(driver),
                )
            )
        return gpus
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


@lru_cache(maxsize=1)
def nvidia_gpus() -> tuple[Gpu, ...]:
    """Every GPU the NVIDIA driver reports, ``CUDA_VISIBLE_DEVICES`` not applied (empty: none, or no driver)."""
    found = _from_nvidia_smi()
    if found is None:
        found = _from_nvml()
    return tuple(found or ())


def visible_gpus(gpus: Sequence[Gpu] | None = None) -> list[Gpu]:
    """The GPUs a CUDA program started now would see, in its order: ``CUDA_VISIBLE_DEVICES`` applied (an
    index or a UUID each; CUDA stops at the first entry that names no GPU)."""
    gpus = list(nvidia_gpus() if gpus is None else gpus)
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return gpus
    visible = []
    for entry in (e.strip() for e in chosen.split(",")):
        match = [
            g
            for g in gpus
            if (entry.isdigit() and g.index == int(entry))
            or (entry.startswith("GPU-") and g.uuid.startswith(entry))
        ]
        if not match or match[0] in visible:
            break
        visible.append(match[0])
    return visible


def gpus_hidden_on_purpose() -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` hides every GPU (``""`` or ``-1``): the user chose the CPU."""
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    return chosen is not None and chosen.strip() in ("", "-1")


# The oldest Linux driver each CUDA major version runs on (NVIDIA's minor-version compatibility table):
# torch 2.13.0 from PyPI is the CUDA 13.0 build, which needs 580 or newer.
MIN_DRIVER = {13: "580.65.06", 12: "525.60.13", 11: "450.80.02"}


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


@dataclass(frozen=True)
class TorchCuda:
    """What the installed torch makes of CUDA on this machine."""

    version: str
    cuda: str | None  # the CUDA version torch was built for; None: a CPU build
    available: bool
    device_count: int


def torch_cuda() -> TorchCuda:
    """Ask torch (imports it, and initialises CUDA: pin ranks first)."""
    import torch

    available = torch.cuda.is_available()
    return TorchCuda(
        torch.__version__, torch.version.cuda, available, torch.cuda.device_count() if available else 0
    )


def driver_too_old(driver: str, cuda: str | None) -> str | None:
    """The oldest driver the CUDA build ``cuda`` runs on, when ``driver`` is older than that; else None."""
    if not cuda or not driver:
        return None
    needed = MIN_DRIVER.get(_version_tuple(cuda)[0])
    if needed is None or _version_tuple(driver) >= _version_tuple(needed):
        return None
    return needed


def cuda_unusable(gpus: Sequence[Gpu] | None = None, torch_state: TorchCuda | None = None) -> str | None:
    """Why torch cannot use the GPUs the driver reports (one line with the fix), or None: it can, there are
    none, or ``CUDA_VISIBLE_DEVICES`` hides them on purpose. A GPU machine never falls back to the CPU
    without this being said."""
    gpus = visible_gpus(gpus)
    if not gpus or gpus_hidden_on_purpose():
        return None
    state = torch_cuda() if torch_state is None else torch_state
    if state.available:
        return None
    seen = f"nvidia-smi sees {len(gpus)} GPU{'s' * (len(gpus) > 1)} ({gpus[0].name}, driver {gpus[0].driver})"
    cpu_instead = "to run on the CPU on purpose, set device cpu or CUDA_VISIBLE_DEVICES= (empty)"
    if state.cuda is None:
        return (
            f"{seen} but torch {state.version} is a CPU build: install the GPU lock "
            f"(LOCK=requirements/gpu.txt bash scripts/setup.sh); {cpu_instead}"
        )
    needed = driver_too_old(gpus[0].driver, state.cuda)
    if needed:
        return (
            f"{seen} but torch {state.version} is built for CUDA {state.cuda}, which needs driver >= {needed}: "
            f"update the NVIDIA driver, or install a torch built for an older CUDA; {cpu_instead}"
        )
    return (
        f"{seen} but torch {state.version} (CUDA {state.cuda}) cannot use them: check the driver "
        f"(nvidia-smi) and CUDA_VISIBLE_DEVICES; {cpu_instead}"
    )


# ------------------------------------------------------------------------------------------ launchers


@dataclass(frozen=True)
class LauncherProcesses:
    """How many processes a launcher starts on this machine: a number, or ``auto``; None when it does not
    say (a launcher spag does not know: its own default applies)."""

    option: str | None
    value: str | None
    machines: int = 1

    @property
    def auto(self) -> bool:
        return self.value == AUTO

    def per_machine(self) -> int | None:
        if self.value is None or not self.value.isdigit():
            return None
        count = int(self.value)
        if self.option in ("--num_processes", "--num-processes"):  # accelerate counts every machine's
            return max(1, count // max(1, self.machines))
        return count


def _option_value(argv: list[str], names: Sequence[str]) -> tuple[str | None, str | None, int | None]:
    """(option, value, position of the value) of the first of ``names`` in ``argv`` (``--opt V`` or ``--opt=V``)."""
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in names:
            if eq:
                return name, value, i
            if i + 1 < len(argv):
                return name, argv[i + 1], i + 1
    return None, None, None


def launcher_processes(launcher: str) -> LauncherProcesses:
    """The process count a launcher string asks for on this machine (see :class:`LauncherProcesses`)."""
    argv = shlex.split(launcher)
    option, value, _ = _option_value(argv, PROCESS_OPTIONS)
    _, machines, _ = _option_value(argv, MACHINE_OPTIONS)
    return LauncherProcesses(option, value, int(machines) if machines and machines.isdigit() else 1)


def auto_processes(gpus: int, per_process: int = 1) -> int:
    """What ``auto`` means: one process per ``per_process`` visible GPUs, one on a machine without a GPU."""
    return max(1, gpus // max(1, per_process))


def launcher_command(launcher: str) -> list[str]:
    """``launcher`` as arguments; a launcher not on PATH is looked for beside this Python (a virtual
    environment's ``torchrun`` or ``accelerate`` when spag runs without the environment activated)."""
    argv = shlex.split(launcher)
    if argv and shutil.which(argv[0]) is None:
        beside = Path(sys.executable).parent / argv[0]
        if beside.is_file():
            argv[0] = str(beside)
    return argv


def resolve_launcher(launcher: str, gpus: int | None = None, per_process: int = 1) -> str:
    """``launcher`` with a process count of ``auto`` replaced by :func:`auto_processes` of the visible GPUs.

    torchrun has an ``auto`` of its own, which is the CPU count on a machine without a GPU: 16 DeepSpeed
    processes on a 16-core laptop. spag resolves it first, so ``auto`` means one process per GPU everywhere.
    """
    argv = shlex.split(launcher)
    option, value, position = _option_value(argv, PROCESS_OPTIONS)
    if value != AUTO or position is None:
        return launcher
    count = auto_processes(len(visible_gpus()) if gpus is None else gpus, per_process)
    argv[position] = (
        argv[position].replace(f"{option}={AUTO}", f"{option}={count}")
        if "=" in argv[position]
        else str(count)
    )
    return shlex.join(argv)


def check_launch(
    launcher: str | None,
    deepspeed: str | os.PathLike | None,
    launcher_key: str = "--launcher",
    deepspeed_key: str = "--deepspeed",
) -> None:
    """Before any work: the launcher is a command line whose program is there, and the DeepSpeed file is a
    JSON object. DataError naming the option (or params key) otherwise."""
    if launcher is not None:
        try:
            argv = launcher_command(launcher)
        except ValueError as exc:
            raise DataError(launcher_key, None, f"{launcher!r} is not a command line ({exc})") from None
        if not argv:
            raise DataError(launcher_key, None, "is empty (null runs training in this process)")
        if shutil.which(argv[0]) is None:
            raise DataError(
                launcher_key, None, f"{argv[0]!r}: no such program (on PATH or beside {sys.executable})"
            )
    if deepspeed is not None:
        path = Path(deepspeed)
        if path.exists() and not path.is_file():  # a folder, or a FIFO that would never end
            raise DataError(path, None, f"is not a regular file ({deepspeed_key})")
        try:
            settings = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(path, None, f"no such file ({deepspeed_key})") from None
        except (OSError, UnicodeError) as exc:
            raise DataError(
                path, None, f"cannot be read ({getattr(exc, 'strerror', None) or exc}) ({deepspeed_key})"
            ) from None
        except json.JSONDecodeError as exc:
            raise DataError(
                path, None, f"not valid JSON (line {exc.lineno}: {exc.msg}) ({deepspeed_key})"
            ) from None
        if not isinstance(settings, dict):
            raise DataError(
                path,
                None,
                f"expected a JSON object of DeepSpeed settings, got "
                f"{type(settings).__name__} ({deepspeed_key})",
            )


def free_port() -> int:
    """A TCP port on this host that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------------------ ranks


def local_rank() -> int | None:
    """This process's rank on its machine under a launcher (``LOCAL_RANK``); None when not launched."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.strip().isdigit() else None


def launched_processes() -> int:
    """Processes on this machine under a launcher (``LOCAL_WORLD_SIZE``, else ``WORLD_SIZE``); 1 when not launched."""
    for name in ("LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 1


def hf_rank_device(rank: int, device_count: int) -> str:
    """The device of local rank ``rank`` on a machine with ``device_count`` visible GPUs: ``cuda:RANK``."""
    if rank >= device_count:
        raise DataError(
            "--device",
            None,
            f"local rank {rank} has no GPU of its own: {device_count} visible; start "
            f"at most {device_count} processes per machine (--nproc_per_node auto)",
        )
    return f"cuda:{rank}"


def rank_gpu_ids(rank: int, tensor_parallel_size: int, visible: Sequence[str]) -> list[str]:
    """The GPUs (their ``CUDA_VISIBLE_DEVICES`` entries) of local rank ``rank``, whose engine spans
    ``tensor_parallel_size`` GPUs: the ``rank``-th group of that many, in visible order."""
    start = rank * tensor_parallel_size
    ids = list(visible[start : start + tensor_parallel_size])
    if len(ids) < tensor_parallel_size:
        raise DataError(
            "--tensor-parallel-size",
            None,
            f"local rank {rank} needs GPUs {start}..{start + tensor_parallel_size - 1} of the "
            f"{len(visible)} visible: start at most {len(visible) // max(1, tensor_parallel_size)} "
            f"processes per machine with tensor_parallel_size {tensor_parallel_size}",
        )
    return ids


def pin_rank_to_gpus(tensor_parallel_size: int = 1) -> str | None:
    """Under a launcher, make this rank's GPUs the only visible ones (``CUDA_VISIBLE_DEVICES``), so that an
    engine that takes "the GPU" (vLLM: ``cuda`` means GPU 0) takes this rank's. Must run before torch or vLLM
    touch CUDA. Returns the value set; None when not launched or without a GPU (vLLM's CPU build)."""
    rank = local_rank()
    if rank is None or launched_processes() <= 1 and tensor_parallel_size <= 1:
        return None
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is not None and chosen == os.environ.get(_PINNED):
        return chosen  # pinned already (a second player in the same rank)
    gpus = visible_gpus()
    if not gpus:
        return None
    # The user's own naming of the GPUs (indices or UUIDs) is kept.
    names = (
        [e.strip() for e in chosen.split(",")][: len(gpus)]
        if chosen is not None
        else [str(g.index) for g in gpus]
    )
    pinned = ",".join(rank_gpu_ids(rank, tensor_parallel_size, names))
    os.environ["CUDA_VISIBLE_DEVICES"] = os.environ[_PINNED] = pinned
    return pinned
