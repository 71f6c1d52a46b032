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
LOCKS = {"cpu.txt": ["dev"], "cpu-oldtf.txt": ["dev"], "gpu.txt": ["dev", "gpu"]}


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


@pytest.mark.parametrize("lock", ["cpu.txt", "cpu-oldtf.txt"])
def test_cpu_locks_hold_torch_cpu_build_and_no_cuda_library(lock):
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


def test_oldtf_lock_is_the_cpu_lock_with_the_gpu_transformers():
    cpu, oldtf, gpu = read_lock("cpu.txt"), read_lock("cpu-oldtf.txt"), read_lock("gpu.txt")
    assert oldtf["transformers"] == gpu["transformers"] != cpu["transformers"]
    differ = {p for p in cpu.keys() | oldtf.keys() if cpu.get(p) != oldtf.get(p)}
    assert differ == {"transformers"}, f"cpu-oldtf.txt differs from cpu.txt in more than transformers: {differ}"
