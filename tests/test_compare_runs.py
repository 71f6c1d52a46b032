"""scripts/compare_runs.py: two runs compared output by output, a folder entry by entry."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import yaml

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_runs.py"


def _run(root: Path, model_md5: str, shard_md5: str) -> Path:
    """A run with a stage writing one file and a stage writing a folder of two files."""
    listing = [{"relpath": "a.parquet", "md5": "1" * 32}, {"relpath": "b.parquet", "md5": shard_md5}]
    digest = hashlib.md5(json.dumps(listing).encode()).hexdigest()
    cache = root / ".dvc" / "cache" / "files" / "md5" / digest[:2]
    cache.mkdir(parents=True)
    (cache / f"{digest[2:]}.dir").write_text(json.dumps(listing))
    lock = {
        "schema": "2.0",
        "stages": {
            "imitate": {"outs": [{"path": "data/imitation/model.safetensors", "md5": model_md5}]},
            "play@1": {"outs": [{"path": "data/epoch_1/episodes", "md5": f"{digest}.dir"}]},
        },
    }
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    return root


def _compare(a: Path, b: Path):
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True, check=False
    )


def test_identical_runs_compare_the_same(tmp_path):
    a = _run(tmp_path / "a", "0" * 32, "2" * 32)
    b = _run(tmp_path / "b", "0" * 32, "2" * 32)
    result = _compare(a, b)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[-1]
        == "[compare_runs] 2 of 2 stages with every output the same (paths, times, manifests aside)"
    )


def test_a_differing_file_and_folder_entry_are_named(tmp_path):
    a = _run(tmp_path / "a", "0" * 32, "2" * 32)
    b = _run(tmp_path / "b", "9" * 32, "3" * 32)
    result = _compare(a, b)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "imitate: 1 differ: data/imitation/model.safetensors" in lines
    assert "play@1: 1 differ: data/epoch_1/episodes/b.parquet" in lines


def test_a_folder_without_a_run_is_refused(tmp_path):
    result = _compare(tmp_path, tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr.strip() == f"error: {tmp_path / 'dvc.lock'}: no dvc.lock (run `dvc repro` there first)"
    )


def test_files_equal_but_for_their_run_folder_or_times_count_as_the_same(tmp_path):
    runs = []
    for name, seconds in (("a", 1.5), ("b", 2.5)):
        root = tmp_path / name
        (root / "out").mkdir(parents=True)
        summary = {"model": str(root.resolve() / "model"), "loss": 0.25, "train_seconds": seconds}
        (root / "out" / "summary.json").write_text(json.dumps(summary))
        md5 = hashlib.md5((root / "out" / "summary.json").read_bytes()).hexdigest()
        lock = {"schema": "2.0", "stages": {"train": {"outs": [{"path": "out/summary.json", "md5": md5}]}}}
        (root / "dvc.lock").write_text(yaml.safe_dump(lock))
        runs.append(root)
    result = _compare(*runs)
    assert result.returncode == 0, result.stdout
    assert "train: same; 1 times only" in result.stdout.splitlines()
    summary = {"model": str(runs[1].resolve() / "model"), "loss": 0.5, "train_seconds": 2.5}
    (runs[1] / "out" / "summary.json").write_text(json.dumps(summary))
    result = _compare(*runs)
    assert result.returncode == 1
    assert "train: 1 differ: out/summary.json" in result.stdout.splitlines()
