"""Resume that cannot lie: partial results are keyed by the content they depend on (the model's files,
the data, the settings), so a model retrained at the same path is never credited with the old one's work.
"""

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from spag.harness.folders import MARKER
from spag.runtime.fingerprint import model_fingerprint
from spag.testing import make_tiny_checkpoint


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return make_tiny_checkpoint(root / "a", seed=0), make_tiny_checkpoint(root / "b", seed=1)


def replace_model(source, target):
    shutil.rmtree(target)
    shutil.copytree(source, target)


def test_model_fingerprint_follows_content_not_path(models, tmp_path):
    a, b = models
    moved = tmp_path / "moved"
    shutil.copytree(a, moved)
    assert model_fingerprint(moved) == model_fingerprint(a)
    replace_model(b, moved)
    assert model_fingerprint(moved) == model_fingerprint(b) != model_fingerprint(a)


def test_a_weight_files_digest_is_kept_across_processes_until_the_file_changes(tmp_path, monkeypatch):
    """A large file's digest is read back from spag's cache in a later process (here: a forged entry is
    believed while the file's stat is unchanged), and hashed again once the file is rewritten, even to the
    same size; a small file is never kept; an unwritable cache is passed over."""
    import hashlib
    import os

    from spag.runtime import fingerprint

    monkeypatch.setenv("SPAG_CACHE", str(tmp_path / "cache"))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(os.urandom(fingerprint.KEPT_FROM))
    real = hashlib.blake2b(weights.read_bytes()).hexdigest()
    assert fingerprint.file_digest(weights) == real
    kept = list((tmp_path / "cache" / "digests").rglob("*"))
    kept = [p for p in kept if p.is_file()]
    assert [p.read_text().strip() for p in kept] == [real]

    monkeypatch.setattr(fingerprint, "_FILE_DIGESTS", {})  # a new process
    kept[0].write_text("0" * 128 + "\n")
    assert fingerprint.file_digest(weights) == "0" * 128  # read, not hashed

    monkeypatch.setattr(fingerprint, "_FILE_DIGESTS", {})
    time.sleep(0.01)
    weights.write_bytes(os.urandom(fingerprint.KEPT_FROM))  # same size, new bytes
    assert fingerprint.file_digest(weights) == hashlib.blake2b(weights.read_bytes()).hexdigest() != real

    small = tmp_path / "config.json"
    small.write_text("{}")
    before = {p for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    fingerprint.file_digest(small)
    assert {p for p in (tmp_path / "cache").rglob("*") if p.is_file()} == before

    monkeypatch.setenv("SPAG_CACHE", str(small))  # a file where the cache should be: nothing kept, no error
    monkeypatch.setattr(fingerprint, "_FILE_DIGESTS", {})
    assert fingerprint.file_digest(weights) == hashlib.blake2b(weights.read_bytes()).hexdigest()
    assert not list(tmp_path.glob("*.tmp")) and small.read_text() == "{}"


@pytest.mark.slow
def test_benchmark_resumed_after_a_retrain_at_the_same_path_scores_the_new_model(models, tmp_path):
    """Issue 11: `spag benchmark` resumed from FILE.json.parts/ keyed by the model's path."""
    from spag.evaluate import benchmark as bm

    a, b = models
    model, out = tmp_path / "model", tmp_path / "metrics" / "bench.json"
    shutil.copytree(a, model)
    parts = out.with_name(out.name + ".parts")

    def finished_tasks():  # the folder's own record (MARKER, also .json) appears a moment before a task's part
        return [p for p in parts.glob("*.json") if p.name != MARKER]

    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "benchmark",
            "--model",
            str(model),
            "--suite",
            "local",
            "--limit",
            "8",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not finished_tasks() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    run.send_signal(signal.SIGKILL)
    run.wait()
    kept = finished_tasks()
    assert kept and not out.exists(), "the run should have been killed after its first task"

    replace_model(b, model)  # "retrain" to model B at the same path
    notes = []
    resumed = bm.run_benchmark(
        str(model), suite="local", limit=8, output=out, batch_size=8, show_progress=False, say=notes.append
    )
    fresh = bm.run_benchmark(
        str(b),
        suite="local",
        limit=8,
        output=tmp_path / "fresh" / "bench.json",
        batch_size=8,
        show_progress=False,
        say=lambda _: None,
    )
    assert resumed["tasks"] == fresh["tasks"]
    assert bm.samples_path(out).read_text() == bm.samples_path(tmp_path / "fresh" / "bench.json").read_text()
    assert any("computed for something else" in n and "model" in n for n in notes), notes


def test_benchmark_resume_keeps_a_part_of_the_same_model_and_settings(models, tmp_path):
    from spag.evaluate import benchmark as bm

    a, _ = models
    out = tmp_path / "bench.json"
    task = "spag_physical"
    stamp = bm._fingerprint(str(a), "local", task, 4, 0, False)
    kept = {
        "metric": "acc",
        "score": 0.25,
        "stderr": 0.1,
        "n": 4,
        "num_fewshot": 0,
        "samples": [
            {"benchmark": task, "task": task, "doc_id": i, "correct": float(i == 0)} for i in range(4)
        ],
    }
    bm._write_part(out.with_name(out.name + ".parts"), task, stamp, kept)
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)  # the same weights elsewhere: same content, the part still counts
    notes = []
    metrics = bm.run_benchmark(
        str(copy), tasks=[task], suite="local", limit=4, output=out, show_progress=False, say=notes.append
    )
    assert metrics["tasks"][task]["score"] == 0.25
    assert any("kept from an interrupted run" in n for n in notes)


def test_reference_cache_is_recomputed_for_a_model_retrained_at_the_same_path(models, tmp_path, capsys):
    from spag.models.loading import load_tokenizer
    from spag.rewards.rows import read_rows
    from spag.train.data import encode_rows
    from spag.train.reference import reference_logprobs

    a, b = models
    ref = tmp_path / "ref"
    shutil.copytree(a, ref)
    data = tmp_path / "rows.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": f"Question {i}?",
                    "completion": f"Answer {i}.",
                    "reward": None,
                    "weight": 1.0,
                    "role": None,
                    "kind": "sft",
                    "target_word": None,
                    "turn": None,
                    "episode": None,
                }
            )
            + "\n"
            for i in range(3)
        )
    )
    tokenizer = load_tokenizer(ref)
    encoded = encode_rows(read_rows(data), tokenizer, 128, show_progress=False)
    first, _, reused = reference_logprobs(data, encoded, ref, tokenizer.pad_token_id, show_progress=False)
    assert not reused
    again, _, reused = reference_logprobs(data, encoded, ref, tokenizer.pad_token_id, show_progress=False)
    assert reused and again == first
    replace_model(b, ref)
    second, _, reused = reference_logprobs(data, encoded, ref, tokenizer.pad_token_id, show_progress=False)
    expected, _, _ = reference_logprobs(
        tmp_path / "elsewhere" / "rows.jsonl", encoded, b, tokenizer.pad_token_id, show_progress=False
    )
    assert not reused and second == expected != first
    assert "are for other rows, another reference model" in capsys.readouterr().out
