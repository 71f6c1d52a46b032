#!/usr/bin/env python3
"""Wheels for a GPU node that reaches no package registry (docs/gpu.md, "On an offline node").

    python scripts/wheelhouse.py build DIR --python 3.12 --freeze NODE-FREEZE.txt [--platform manylinux_2_28_x86_64]
    python scripts/wheelhouse.py build DIR --python 3.12 --lock     # every pin of requirements/gpu.txt
    python3 scripts/wheelhouse.py install DIR                        # on the node: pip install --no-index

``build`` runs where PyPI can be reached. It writes into DIR the wheels of what the GPU check needs
(requirements/gpu-check.txt) and of their own dependencies, each at requirements/gpu.txt's version, for the node's
Python and platform, leaving out what the node's ``pip freeze`` already holds at a version spag accepts
(pyproject.toml's range) and its dependents accept (their wheels' Requires-Dist). DeepSpeed publishes only its
source: its wheel is built here (pure Python; its ops compile on the node on first use). DIR/requirements.txt names
what DIR holds, and the total size is printed. ``install`` runs on the node, with the Python that runs the check.
"""

from __future__ import annotations

import argparse
import email.parser
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.tags import Tag, compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.tags import Tag, compatible_tags, cpython_tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename
    from pip._vendor.packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
NEEDS = ROOT / "requirements" / "gpu-check.txt"
LOCK = ROOT / "requirements" / "gpu.txt"
PYPROJECT = ROOT / "pyproject.toml"
MANIFEST = "requirements.txt"
WRITTEN_BY = "# written by scripts/wheelhouse.py: the wheels of this folder, for pip install --no-index\n"
MIB = 1024 * 1024
FREEZE_LIMIT = 4 * MIB  # a pip freeze is a few KiB; anything larger is not one


class WheelhouseError(Exception):
    """What stops a wheelhouse, in one line."""


# ------------------------------------------------------------------------------------------ reading the lists


def read_names(path: Path) -> list[str]:
    """The package names of requirements/gpu-check.txt: one a line, comments after #."""
    names = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [canonicalize_name(name) for name in names if name]


def read_freeze(text: str, source: str = "freeze") -> dict[str, Version | None]:
    """What a ``pip freeze`` holds: name -> version, None where it gives none (``name @ url``, ``-e``, a bare name)."""
    held: dict[str, Version | None] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-e "):
            egg = re.search(r"#egg=([A-Za-z0-9._-]+)", line)
            if egg:
                held[canonicalize_name(egg.group(1))] = None
            continue
        name, pinned, version = (part.strip() for part in line.partition("=="))
        if not pinned:  # a bare name, or `name @ url`
            name = re.sub(r"\s*@\s*\S+$", "", line)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise WheelhouseError(f"{source}:{number}: {line!r} is not `name==version`")
        try:
            held[canonicalize_name(name)] = Version(version) if pinned else None
        except InvalidVersion:
            raise WheelhouseError(f"{source}:{number}: {version!r} is not a version") from None
    return held


def read_lock(path: Path = LOCK) -> dict[str, Version]:
    """requirements/gpu.txt: name -> pinned version."""
    pins = read_freeze(path.read_text(), str(path))
    return {name: version for name, version in pins.items() if version is not None}


def spag_ranges(path: Path = PYPROJECT) -> dict[str, Requirement]:
    """pyproject.toml's requirements of spag and its gpu extra, by name: the versions spag accepts."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11: every version is taken as accepted
        return {}
    project = tomllib.loads(path.read_text())["project"]
    lines = project["dependencies"] + project.get("optional-dependencies", {}).get("gpu", [])
    return {canonicalize_name(Requirement(line).name): Requirement(line) for line in lines}


# ------------------------------------------------------------------------------------------ what the node lacks


@dataclass
class Target:
    """The node: its Python (``3.12`` or ``3.12.3``), its platform tag and what its ``pip freeze`` holds."""

    python: str
    platform: str = "manylinux_2_28_x86_64"
    held: dict[str, Version | None] = field(default_factory=dict)

    def marker_environment(self, extra: str = "") -> dict[str, str]:
        full = self.python if self.python.count(".") >= 2 else self.python + ".0"
        return {
            "python_version": ".".join(self.python.split(".")[:2]),
            "python_full_version": full,
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "implementation_version": full,
            "sys_platform": "linux",
            "platform_system": "Linux",
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_release": "",
            "platform_version": "",
            "extra": extra,
        }

    @property
    def machine(self) -> str:
        return re.sub(r"^(manylinux_\d+_\d+|manylinux\d+|musllinux_\d+_\d+|linux)_", "", self.platform)

    def platforms(self) -> list[str]:
        """The platform tags the node takes: a manylinux_2_N tag takes every older glibc's."""
        found = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", self.platform)
        if not found:
            return [self.platform]
        newest, arch = int(found.group(1)), found.group(2)
        tags = [f"manylinux_2_{minor}_{arch}" for minor in range(newest, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        return tags + [f"{name}_{arch}" for minor, name in legacy.items() if minor <= newest]

    def tags(self) -> set[Tag]:
        version = tuple(int(part) for part in self.python.split(".")[:2])
        return set(cpython_tags(version, platforms=self.platforms())) | set(
            compatible_tags(version, "cp" + "".join(map(str, version)), platforms=self.platforms())
        )

    def wants(self, requirement: Requirement, extra: str = "") -> bool:
        """Whether a Requires-Dist line applies on the node (its marker), for one of the asked extras."""
        return requirement.marker is None or requirement.marker.evaluate(self.marker_environment(extra))


def satisfied(requirement: Requirement, held: dict[str, Version | None]) -> bool | None:
    """True when ``held`` has it at an accepted version, False when not, None when held at an unknown version."""
    name = canonicalize_name(requirement.name)
    if name not in held:
        return False
    version = held[name]
    if version is None:
        return None
    return requirement.specifier.contains(version, prereleases=True)


def lacking(
    needed: list[Requirement], held: dict[str, Version | None]
) -> tuple[list[Requirement], list[str]]:
    """The requirements the node does not meet, and the names it holds at versions nobody recorded."""
    missing = [requirement for requirement in needed if satisfied(requirement, held) is False]
    unknown = sorted({canonicalize_name(r.name) for r in needed if satisfied(r, held) is None})
    return missing, unknown


def requires_dist(wheel: Path) -> list[Requirement]:
    """The Requires-Dist lines of a wheel's METADATA (WheelhouseError naming a wheel that has none to read)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            metadata = next(
                (name for name in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", name)),
                None,
            )
            if metadata is None:
                raise WheelhouseError(
                    f"{wheel}: not a wheel (no .dist-info/METADATA): remove it and build again"
                )
            message = email.parser.Parser().parsestr(archive.read(metadata).decode("utf-8"))
        return [Requirement(line) for line in message.get_all("Requires-Dist") or []]
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError, ValueError) as problem:
        raise WheelhouseError(
            f"{wheel}: not a readable wheel ({type(problem).__name__}): remove it and build again"
        ) from None


@dataclass
class Plan:
    wheels: dict[str, Path] = field(default_factory=dict)  # name -> the wheel in the wheelhouse
    unknown: set[str] = field(default_factory=set)  # held at a version nobody recorded: taken as present
    replaced: dict[str, str] = field(default_factory=dict)  # held at a version a package here does not accept


def plan(needed: list[Requirement], target: Target, lock: dict[str, Version], fetch) -> Plan:
    """The wheels the node needs: ``needed`` and, from each fetched wheel's Requires-Dist, its dependencies, minus
    what the node holds at an accepted version. ``fetch(name, version)`` returns the wheel's path."""
    result = Plan()
    extras: dict[str, set[str]] = {}
    queue = [(requirement, "the GPU check") for requirement in needed]
    while queue:
        requirement, wanted_by = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if name in result.wheels:
            version = parse_wheel_filename(result.wheels[name].name)[1]
            if not requirement.specifier.contains(version, prereleases=True):
                raise WheelhouseError(
                    f"{wanted_by} needs {requirement}; requirements/gpu.txt pins {name} {version}"
                )
        else:
            held = satisfied(requirement, target.held)
            if held is None:
                result.unknown.add(name)
            if held is not False:
                continue
            if name not in lock:
                raise WheelhouseError(
                    f"{wanted_by} needs {requirement}, which the node lacks and "
                    f"requirements/gpu.txt does not pin"
                )
            if not requirement.specifier.contains(lock[name], prereleases=True):
                raise WheelhouseError(
                    f"{wanted_by} needs {requirement}; requirements/gpu.txt pins {name} {lock[name]}"
                )
            if name in target.held:
                result.replaced[name] = f"{target.held[name]} -> {lock[name]} (for {wanted_by})"
            result.wheels[name] = fetch(name, lock[name])
        new = ({""} | set(requirement.extras)) - extras.get(name, set())  # the extras not yet followed
        extras.setdefault(name, set()).update(new)
        for dependency in requires_dist(result.wheels[name]):
            if any(target.wants(dependency, extra) for extra in new):
                queue.append((dependency, f"{name} {parse_wheel_filename(result.wheels[name].name)[1]}"))
    return result


# ------------------------------------------------------------------------------------------ fetching


def find_wheel(folder: Path, name: str, version: Version, target: Target) -> Path | None:
    """A wheel of ``name`` ``version`` in ``folder`` that installs on the node."""
    tags = target.tags()
    for wheel in sorted(folder.glob("*.whl")):
        wheel_name, wheel_version, _, wheel_tags = parse_wheel_filename(wheel.name)
        if wheel_name == name and wheel_version == version and wheel_tags & tags:
            return wheel
    return None


def pip(*arguments: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *arguments], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise WheelhouseError(f"pip {' '.join(arguments[:1])} {arguments[-1]} failed: {last}")


def fetcher(folder: Path, target: Target):
    """fetch(name, version): the wheel for the node, from the folder, from PyPI, or built here from the source
    release when the package publishes no wheel (DeepSpeed), which must then build to a pure-Python wheel."""

    def fetch(name: str, version: Version) -> Path:
        found = find_wheel(folder, name, version, target)
        if found:
            return found
        print(f"[wheelhouse] {name}=={version}", file=sys.stderr)
        tags = [flag for platform in target.platforms() for flag in ("--platform", platform)]
        try:
            pip(
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                target.python,
                "--implementation",
                "cp",
                *tags,
                "--dest",
                str(folder),
                f"{name}=={version}",
            )
        except WheelhouseError:
            print(
                f"[wheelhouse] {name}=={version}: no wheel for the node on PyPI; building it here",
                file=sys.stderr,
            )
            pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder), f"{name}=={version}")
        found = find_wheel(folder, name, version, target)
        if not found:
            raise WheelhouseError(
                f"{name}=={version}: no wheel for Python {target.python} on {target.platform}, "
                f"and its build here is not pure Python"
            )
        return found

    return fetch


# ------------------------------------------------------------------------------------------ the commands


def tree_bytes() -> int | None:
    """The size of the source tree as git sees it (tracked files and untracked ones it does not ignore)."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=False,
        capture_output=True,
    )
    if done.returncode != 0:
        return None
    paths = {ROOT / name for name in done.stdout.decode().split("\0") if name}
    return sum(path.stat().st_size for path in paths if path.is_file())


def check_folder(folder: Path) -> None:
    """DIR must be a folder (or not exist yet) whose requirements.txt, if any, this script wrote: a file of
    anyone else's is never replaced."""
    if folder.exists() and not folder.is_dir():
        raise WheelhouseError(f"{folder}: not a folder")
    manifest = folder / MANIFEST
    if manifest.is_symlink() or (manifest.exists() and not manifest.is_file()):
        raise WheelhouseError(f"{manifest}: not a plain file; give another DIR")
    if manifest.exists():
        with manifest.open("rb") as f:
            written = f.read(len(WRITTEN_BY.encode())) == WRITTEN_BY.encode()
        if not written:
            raise WheelhouseError(f"{manifest} was not written by this script and is kept: give another DIR")


def write_manifest(folder: Path, lines: list[str]) -> None:
    """DIR/requirements.txt, written whole or not at all (a temporary file moved into place)."""
    work = folder / f".{MANIFEST}.tmp"
    work.write_text(WRITTEN_BY + "".join(lines))
    work.replace(folder / MANIFEST)


def read_freeze_file(path: Path) -> dict[str, Version | None]:
    """A saved ``pip freeze``: a regular file of at most :data:`FREEZE_LIMIT` (a FIFO or a device is refused
    before it is read: it could wait forever, or never end)."""
    if not path.is_file():
        raise WheelhouseError(f"--freeze {path}: not a regular file (save the node's pip freeze to a file)")
    if path.stat().st_size > FREEZE_LIMIT:
        raise WheelhouseError(f"--freeze {path}: {path.stat().st_size / MIB:.0f} MiB is not a pip freeze")
    try:
        return read_freeze(path.read_text(), str(path))
    except (OSError, UnicodeDecodeError) as problem:
        raise WheelhouseError(f"--freeze {path}: cannot be read ({type(problem).__name__})") from None


def build(folder: Path, target: Target, whole_lock: bool) -> Plan:
    check_folder(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = read_lock()
    fetch = fetcher(folder, target)
    if whole_lock:
        result = Plan(wheels={name: fetch(name, version) for name, version in lock.items()})
    else:
        ranges = spag_ranges()
        needed = [ranges.get(name) or Requirement(name) for name in read_names(NEEDS)]
        result = plan(needed, target, lock, fetch)
    lines = [
        f"{name}=={parse_wheel_filename(wheel.name)[1]}\n" for name, wheel in sorted(result.wheels.items())
    ]
    write_manifest(folder, lines)
    return result


def report(folder: Path, result: Plan) -> None:
    total = sum(wheel.stat().st_size for wheel in result.wheels.values())
    for name, wheel in sorted(result.wheels.items()):
        print(f"{wheel.stat().st_size / MIB:8.2f} MiB  {wheel.name}")
    for name, change in sorted(result.replaced.items()):
        print(f"[wheelhouse] replaces the node's {name} {change}")
    if result.unknown:
        print(
            f"[wheelhouse] taken as present, the freeze gives no version: {', '.join(sorted(result.unknown))}"
        )
    print(
        f"[wheelhouse] {len(result.wheels)} wheels, {total / MIB:.1f} MiB in {folder} "
        f"(listed in {folder / MANIFEST})"
    )
    tree = tree_bytes()
    if tree is not None:
        print(f"[wheelhouse] with the source tree ({tree / MIB:.1f} MiB): {(total + tree) / MIB:.1f} MiB")


def install_command(folder: Path, python: str) -> list[str]:
    return [
        python,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--find-links",
        str(folder),
        "-r",
        str(folder / MANIFEST),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="write the wheels a node lacks into DIR (needs PyPI)")
    make.add_argument("folder", type=Path, metavar="DIR")
    make.add_argument("--python", required=True, help="the node's Python, e.g. 3.12 or 3.12.3")
    make.add_argument("--platform", default="manylinux_2_28_x86_64", help="the node's platform tag")
    make.add_argument("--freeze", type=Path, help="the node's `python -m pip freeze`, saved to a file")
    make.add_argument(
        "--lock", action="store_true", help="every pin of requirements/gpu.txt, whatever the node holds"
    )
    put = commands.add_parser("install", help="install DIR's wheels with pip --no-index (on the node)")
    put.add_argument("folder", type=Path, metavar="DIR")
    put.add_argument(
        "--python", default=sys.executable, help="the Python to install into (default: this one)"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            if not (args.folder / MANIFEST).is_file():
                raise WheelhouseError(f"{args.folder / MANIFEST} not found: build the wheelhouse first")
            return subprocess.run(install_command(args.folder, args.python), check=False).returncode
        if not args.lock and args.freeze is None:
            raise WheelhouseError(
                "--freeze FILE (the node's pip freeze) is needed, or --lock for the whole lock"
            )
        if not re.fullmatch(r"3\.\d+(\.\d+)?", args.python):
            raise WheelhouseError(f"--python {args.python!r}: give the node's Python version, e.g. 3.12")
        check_folder(args.folder)
        held = read_freeze_file(args.freeze) if args.freeze else {}
        report(args.folder, build(args.folder, Target(args.python, args.platform, held), args.lock))
    except WheelhouseError as problem:
        print(f"[wheelhouse] error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
