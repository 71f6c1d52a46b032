"""scripts/wheelhouse.py: what an offline GPU node lacks of the check's needs, worked out without a network."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from spag.testing import load_script

ROOT = Path(__file__).resolve().parents[1]
wheelhouse = load_script(ROOT / "scripts" / "wheelhouse.py")


def make_wheel(folder: Path, name: str, version: str, requires: list[str], tag: str = "py3-none-any") -> Path:
    path = folder / f"{name}-{version}-{tag}.whl"
    metadata = "".join(f"Requires-Dist: {line}\n" for line in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            f"{name}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{metadata}",
        )
    return path


def test_a_freeze_and_what_it_lacks():
    held = wheelhouse.read_freeze(
        "torch==2.11.0+cu130\nnumpy==1.21.0\nmsgpack\n# a comment\n"
        "spag @ file:///work/spag\n-e git+https://example.org/x.git#egg=Foo_Bar\n"
    )
    assert held == {
        "torch": Version("2.11.0+cu130"),
        "numpy": Version("1.21.0"),
        "msgpack": None,
        "spag": None,
        "foo-bar": None,
    }
    needed = [Requirement(text) for text in ("torch>=2.1", "numpy>=1.24", "msgpack>=1", "pydantic>=2.5")]
    missing, unknown = wheelhouse.lacking(needed, held)
    assert [str(requirement) for requirement in missing] == ["numpy>=1.24", "pydantic>=2.5"]
    assert unknown == ["msgpack"]


def test_a_bad_freeze_line_is_named():
    with pytest.raises(wheelhouse.WheelhouseError, match=r"node\.txt:2: 'torch=2.0' is not .name==version."):
        wheelhouse.read_freeze("numpy==2.0\ntorch=2.0\n", "node.txt")


def test_the_plan_follows_each_fetched_wheel_dependencies(tmp_path):
    make_wheel(
        tmp_path,
        "alpha",
        "1.0",
        ["beta>=2", "gamma", 'delta ; python_version < "3.12"', 'epsilon ; extra == "docs"', "zeta[fast]"],
    )
    make_wheel(tmp_path, "beta", "2.1", [])
    make_wheel(tmp_path, "zeta", "1.0", ['eta ; extra == "fast"'])
    make_wheel(tmp_path, "eta", "0.5", [])
    lock = {
        name: Version(version)
        for name, version in [
            ("alpha", "1.0"),
            ("beta", "2.1"),
            ("delta", "1"),
            ("epsilon", "1"),
            ("zeta", "1.0"),
            ("eta", "0.5"),
        ]
    }
    fetched = []

    def fetch(name, version):
        fetched.append(name)
        return tmp_path / f"{name}-{version}-py3-none-any.whl"

    target = wheelhouse.Target("3.12", held={"beta": Version("1.0"), "gamma": Version("3.0")})
    result = wheelhouse.plan([Requirement("alpha")], target, lock, fetch)
    # beta is held too old, gamma is held, delta is for older Pythons, epsilon for an extra nobody asked for
    assert sorted(result.wheels) == ["alpha", "beta", "eta", "zeta"] == sorted(fetched)
    assert list(result.replaced) == ["beta"]

    with pytest.raises(wheelhouse.WheelhouseError, match="alpha 1.0 needs gamma, which the node lacks"):
        wheelhouse.plan([Requirement("alpha")], wheelhouse.Target("3.12", held={}), lock, fetch)


def test_wheels_are_matched_to_the_node(tmp_path):
    old_glibc = make_wheel(
        tmp_path, "numpy", "2.3.5", [], "cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64"
    )
    make_wheel(tmp_path, "pydantic_core", "2.50.4", [], "cp311-cp311-manylinux_2_17_x86_64")
    target = wheelhouse.Target("3.12.3", "manylinux_2_28_x86_64")
    assert wheelhouse.find_wheel(tmp_path, "numpy", Version("2.3.5"), target) == old_glibc
    assert wheelhouse.find_wheel(tmp_path, "pydantic-core", Version("2.50.4"), target) is None
    assert target.marker_environment()["python_full_version"] == "3.12.3"


def test_the_image_lacks_what_the_check_carries():
    lock = wheelhouse.read_lock()
    ranges = wheelhouse.spag_ranges()
    names = wheelhouse.read_names(wheelhouse.NEEDS)
    for name in names:
        assert name in lock, (
            f"requirements/gpu-check.txt names {name}, which requirements/gpu.txt does not pin"
        )
        assert name not in ranges or lock[name] in ranges[name].specifier
    assert not {"polars", "duckdb", "dvc", "lm-eval", "wordfreq", "vllm"} & set(names)
    image = wheelhouse.read_freeze((ROOT / "scripts" / "gpu-image-freeze.txt").read_text())
    assert image["transformers"] == Version("5.17.0") and image["torch"] == Version("2.11.0")
    missing, _ = wheelhouse.lacking([ranges.get(name) or Requirement(name) for name in names], image)
    assert {wheelhouse.canonicalize_name(r.name) for r in missing} == {
        "pydantic",
        "lemminflect",
        "deepspeed",
        "trl",
        "datasets",
    }


def test_build_asks_for_a_freeze(tmp_path, capsys):
    assert wheelhouse.main(["build", str(tmp_path / "w"), "--python", "3.12"]) == 2
    assert "--freeze FILE" in capsys.readouterr().err
    assert wheelhouse.main(["install", str(tmp_path)]) == 2
    assert "requirements.txt not found" in capsys.readouterr().err


def test_a_requirements_file_the_script_did_not_write_is_kept(tmp_path, capsys):
    """H1 (fourth attack): `build DIR` emptied a DIR/requirements.txt of someone else's, exit 0."""
    theirs = tmp_path / "w" / "requirements.txt"
    theirs.parent.mkdir()
    theirs.write_text("numpy==2.0\n")
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("torch==2.11.0\n")
    assert wheelhouse.main(["build", str(tmp_path / "w"), "--python", "3.12", "--freeze", str(freeze)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"[wheelhouse] error: {theirs} was not written by this script and is kept: give another DIR"
    ]
    assert theirs.read_text() == "numpy==2.0\n"
    # its own manifest it replaces, whole or not at all
    ours = tmp_path / "ours"
    ours.mkdir()
    wheelhouse.write_manifest(ours, ["numpy==2.3.5\n"])
    wheelhouse.check_folder(ours)
    assert (ours / "requirements.txt").read_text() == wheelhouse.WRITTEN_BY + "numpy==2.3.5\n"
    assert sorted(p.name for p in ours.iterdir()) == ["requirements.txt"]


@pytest.mark.parametrize("case", ["a file", "fifo", "device", "corrupt wheel", "no metadata"])
def test_bad_input_is_one_line_and_never_a_hang(tmp_path, capsys, case):
    """A corrupt wheel, a wheel without METADATA, DIR a file, --freeze /dev/zero or a FIFO ended in a
    traceback, a memory blow-up or a hang."""
    import os

    freeze = tmp_path / "freeze.txt"
    freeze.write_text("torch==2.11.0\n")
    folder = tmp_path / "w"
    if case == "a file":
        folder.write_text("")
        args, expected = ["--freeze", str(freeze)], f"{folder}: not a folder"
    elif case == "fifo":
        os.mkfifo(tmp_path / "fifo")
        args, expected = ["--freeze", str(tmp_path / "fifo")], "not a regular file"
    elif case == "device":
        args, expected = ["--freeze", "/dev/zero"], "--freeze /dev/zero: not a regular file"
    else:
        wheel = tmp_path / "alpha-1.0-py3-none-any.whl"
        if case == "corrupt wheel":
            wheel.write_bytes(b"not a zip")
        else:
            with zipfile.ZipFile(wheel, "w") as archive:
                archive.writestr("alpha/__init__.py", "")
        with pytest.raises(wheelhouse.WheelhouseError, match=f"{wheel}: not a"):
            wheelhouse.requires_dist(wheel)
        return
    assert wheelhouse.main(["build", str(folder), "--python", "3.12", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
