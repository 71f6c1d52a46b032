"""Reasoning benchmarks through lm-evaluation-harness: the paper's suite on real items, offline.

Two suites:

- ``paper``: the paper's benchmarks as lm-eval's stock tasks define them (their prompts, answer choices,
  few-shot settings and metrics). Where the items can be had from a pinned registry artifact
  (:mod:`spag.evaluate.benchmark_data`: MMLU 5-shot, ARC-Easy, ARC-Challenge, HellaSwag, PIQA,
  WinoGrande, GSM8K, and BIG-bench's versions of the tasks BBH was drawn from) the stock task reads them
  from a local folder, offline: only its ``dataset_path`` changes (and a split the artifact lacks, such
  as a training split that a zero-shot task never reads, becomes null). The rest (BBH's formatted items,
  MuTual, LogiQA2) comes from the Hugging Face hub, and only when the hub can be reached: offline, those
  tasks are reported as skipped, with the reason.
- ``local``: four small synthetic multiple-choice tasks shipped in ``spag/evaluate/tasks``: a smoke test
  (a model the size of the embedded one scores at chance there).

``auto`` runs the paper suite where any of its tasks can run and the local one otherwise. The score of
each task is lm-eval's headline metric for it (table below); the summary is the geometric mean over
tasks, as in the paper. ``limit`` takes a fixed random sample of that many items per task, the same for
every model and run (a larger limit includes a smaller one's items), run through lm-eval's ``samples``
option. Per-sample results (one line per item: whether the model got it right, with the item's index
in the task's evaluation split) are written beside the metrics for paired comparisons
(:mod:`spag.evaluate.compare`). Log-likelihoods come from
:class:`~spag.evaluate.shared_prefix.SharedPrefixLM`: lm-eval's HF model, each question encoded once for
all its answer choices.

The offline items are prepared for lm-eval in a ``datasets`` cache of their own content
(:func:`data_cache`), every evaluation split counted against the folder's manifest before anything runs.

A run resumes: each finished task is kept in ``<output>.parts/`` until the whole run is written, stamped
with the model's content hash (:mod:`spag.runtime.fingerprint`), the task data and every setting; a kept task
is reused only for the same stamp (a retrained model at the same path is run again, with a note).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import tempfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from spag.config import SUITES
from spag.evaluate.benchmark_data import (
    BIGBENCH_GENERATIVE,
    BIGBENCH_MULTIPLE_CHOICE,
    DATASETS,
    build_benchmark_data,
    data_hash,
    dataset_path,
    read_manifest,
    splits,
)
from spag.models.loading import pick_device
from spag.runtime.artifacts import cache_dir, cached, fetch_artifact, index_reachable, reachable
from spag.runtime.atomic import write_json_atomic, write_jsonl_atomic
from spag.runtime.console import progress
from spag.runtime.errors import ArtifactError, BenchmarkError
from spag.runtime.fingerprint import differences, model_fingerprint

LOCAL_TASKS_DIR = Path(__file__).resolve().parent / "tasks"
# The items `limit` samples from a task are drawn with this seed and the task's name: fixed, so that every
# checkpoint, training seed and run answers the same items and their results pair up.
ITEM_SAMPLE_SEED = 0


@dataclass(frozen=True)
class PaperTask:
    """A benchmark of the paper suite: lm-eval's ``metric,filter`` key, its few-shot count (None: the
    task's own), how results name it, and the folders of lm-eval's task tree that define it."""

    metric: str
    shots: int | None
    label: str
    folders: tuple[str, ...]


PAPER_TASKS: dict[str, PaperTask] = {
    "mmlu": PaperTask("acc,none", 5, "MMLU (5-shot)", ("mmlu/default",)),
    "arc_easy": PaperTask("acc,none", 0, "ARC-Easy", ("arc",)),
    "arc_challenge": PaperTask("acc,none", 0, "ARC-Challenge", ("arc",)),
    "hellaswag": PaperTask("acc,none", 0, "HellaSwag", ("hellaswag",)),
    "piqa": PaperTask("acc,none", 0, "PIQA", ("piqa",)),
    "winogrande": PaperTask("acc,none", 0, "WinoGrande", ("winogrande",)),
    "gsm8k_cot": PaperTask("exact_match,strict-match", None, "GSM8K (8-shot chain of thought)", ("gsm8k",)),
    "bigbench_bbh_sources": PaperTask(
        "acc,none",
        0,
        "BIG-bench, not BBH: the 18 multiple-choice tasks BBH was drawn from",
        ("bigbench/multiple_choice",),
    ),
    "bigbench_bbh_sources_generate": PaperTask(
        "exact_match,none",
        0,
        "BIG-bench, not BBH: object_counting and word_sorting (generation)",
        ("bigbench/generate_until",),
    ),
    "bbh": PaperTask("exact_match,get-answer", None, "BBH (3-shot chain of thought; from the hub)", ("bbh",)),
    "mutual": PaperTask("r@1,none", 0, "MuTual (from the hub)", ("mutual",)),
    "logiqa2": PaperTask("acc,none", 0, "LogiQA2 (from the hub)", ("logiqa2",)),
}
# Groups defined here (lm-eval has none over BIG-bench's versions of BBH's tasks): the metric they average,
# weighted by size as lm-eval's own bbh group is, and their stock member tasks.
GROUPS: dict[str, tuple[str, list[str]]] = {
    "bigbench_bbh_sources": ("acc", [f"bigbench_{t}_multiple_choice" for t in BIGBENCH_MULTIPLE_CHOICE]),
    "bigbench_bbh_sources_generate": (
        "exact_match",
        [f"bigbench_{t}_generate_until" for t in BIGBENCH_GENERATIVE],
    ),
}
# MuTual's r@1 is its accuracy. Tried in order for a task that is in neither table:
_PREFERRED_METRICS = ("acc", "exact_match", "r@1", "f1", "mcc")
_SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")


def local_tasks() -> dict[str, tuple[str, int | None]]:
    names = sorted(p.stem for p in LOCAL_TASKS_DIR.glob("*.yaml") if not p.name.startswith("_"))
    return {name: ("acc,none", 0) for name in names}


# ---------------------------------------------------------------------------------------- offline


def _offline_flags(on: bool) -> dict:
    """Switch the hub clients' offline mode (env vars, and the flags they read at import time)."""
    import datasets.config
    import huggingface_hub.constants

    before = {
        "env": {k: os.environ.get(k) for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")},
        "datasets": (datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE),
        "hub": huggingface_hub.constants.HF_HUB_OFFLINE,
    }
    if on:
        os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"
        datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
        huggingface_hub.constants.HF_HUB_OFFLINE = True
    return before


@contextlib.contextmanager
def offline_mode(on: bool = True) -> Iterator[None]:
    """Inside the block nothing reaches the hub (when ``on``); the previous state comes back after."""
    before = _offline_flags(on)
    try:
        yield
    finally:
        import datasets.config
        import huggingface_hub.constants

        for key, value in before["env"].items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE = before["datasets"]
        huggingface_hub.constants.HF_HUB_OFFLINE = before["hub"]


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def offline_requested() -> bool:
    return _truthy(os.environ.get("HF_DATASETS_OFFLINE")) or _truthy(os.environ.get("HF_HUB_OFFLINE"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub opens (a quick check, instead of the client's retries)."""
    return reachable(os.environ.get("HF_ENDPOINT", "https://huggingface.co"), timeout)


def cached_datasets(repos) -> list[str]:
    """Which of the hub dataset ``repos`` have anything in the hub cache or the datasets cache."""
    import datasets.config
    import huggingface_hub.constants

    hub = Path(huggingface_hub.constants.HF_HUB_CACHE)
    prepared = Path(datasets.config.HF_DATASETS_CACHE)
    found = []
    for repo in repos:
        owner, _, name = repo.partition("/")
        if (hub / f"datasets--{owner}--{name}").is_dir() or (prepared / f"{owner}___{name}").is_dir():
            found.append(repo)
    return found


# ------------------------------------------------------------------------ the paper suite: which data


@dataclass
class Plan:
    """How one requested benchmark runs: its stock leaf tasks' configs and where their items come from."""

    name: str
    metric: str | None
    shots: int | None
    label: str
    kind: str  # task | group | ours (a group defined in GROUPS)
    leaves: dict[str, dict]  # leaf task -> its stock config (includes resolved, functions not loaded)
    datasets: set[str]  # the offline datasets it reads (hub ids); empty: it reads the hub

    @property
    def offline(self) -> bool:
        return bool(self.datasets)


def stock_manager(names: Sequence[str] | None, extra: Sequence[Path] = ()):
    """lm-eval's task index over the folders that define ``names`` (all of lm-eval's tasks for a name the
    paper table does not know: indexing the whole tree takes seconds, so that index is built once per
    process), and the ``extra`` folders."""
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    root = Path(lm_eval.tasks.__file__).parent
    folders: set[str] = set()
    for name in names or PAPER_TASKS:
        if name not in PAPER_TASKS:
            _named_somewhere(root, [n for n in names if n not in PAPER_TASKS])
            return TaskManager(include_path=[str(p) for p in extra]) if extra else _every_stock_task()
        folders.update(PAPER_TASKS[name].folders)
    return TaskManager(
        include_path=[str(root / f) for f in sorted(folders)] + [str(p) for p in extra],
        include_defaults=False,
    )


@functools.cache
def _every_stock_task():
    """lm-eval's index of all its own tasks (read-only once built: plans and checks share it)."""
    from lm_eval.tasks import TaskManager

    return TaskManager()


def _named_somewhere(root: Path, names: Sequence[str]) -> None:
    """BenchmarkError for a name that no YAML file of lm-eval's task tree mentions, so cannot be one of its
    tasks, groups or tags: told in a fraction of a second, where indexing the tree takes seconds."""
    unseen = set(names)
    for path in root.rglob("*.yaml"):
        text = path.read_text(encoding="utf-8", errors="replace")
        unseen = {name for name in unseen if name not in text}
        if not unseen:
            return
    raise BenchmarkError(f"unknown lm-eval task {next(n for n in names if n in unseen)!r}")


def _stock_config(entry) -> dict:
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(entry.yaml_path, resolve_func=False) if entry.yaml_path else {}


def _leaves(manager, name: str) -> list[str]:
    """The stock leaf tasks of a task, group or group defined here."""
    if name in GROUPS:
        return list(GROUPS[name][1])
    entry = manager.task_index.get(name)
    if entry is None:
        raise BenchmarkError(f"unknown lm-eval task {name!r}")
    if entry.kind.name == "TAG":
        raise BenchmarkError(
            f"{name!r} is a tag, not a task or group; name its tasks: " + ", ".join(sorted(entry.tags))
        )
    if entry.kind.name != "GROUP":
        return [name]
    leaves = []
    for item in _stock_config(entry).get("task", []):
        child = item if isinstance(item, str) else (item.get("task") or item.get("group"))
        child_entry = manager.task_index.get(child)
        if child_entry is not None and child_entry.kind.name == "TAG":
            leaves.extend(sorted(child_entry.tags))
        elif child is not None:
            leaves.extend(_leaves(manager, child))
    return leaves


def plan_task(manager, name: str, metric: str | None, shots: int | None) -> Plan:
    """Which stock tasks ``name`` runs and whether their items can be read offline."""
    leaves = {}
    for leaf in _leaves(manager, name):
        entry = manager.task_index.get(leaf)
        if entry is None:
            raise BenchmarkError(f"{name}: unknown lm-eval task {leaf!r}")
        leaves[leaf] = _stock_config(entry)
    paths = {cfg.get("dataset_path") for cfg in leaves.values()}
    offline = all(path in DATASETS for path in paths)
    kind = "ours" if name in GROUPS else manager.task_index[name].kind.name.lower()
    if kind == "group" and len(paths) != 1:  # one override for all members: only one dataset
        offline = False
    known = PAPER_TASKS.get(name)
    return Plan(
        name,
        metric or (known.metric if known else None),
        shots if shots is not None else (known.shots if known else None),
        known.label if known else name,
        kind,
        leaves,
        set(paths) if offline else set(),
    )


def _overrides(
    plan: Plan, leaf: str, folder: Path, manifest: dict, shots: int | None, cache: Path | None = None
) -> dict:
    """What a stock leaf task needs changed to read the offline items: its ``dataset_path``, the splits
    the artifacts lack set to null (BenchmarkError when it could not run without them) and, when given,
    the ``datasets`` cache its items are prepared in."""
    cfg = plan.leaves[leaf]
    built = splits(manifest, cfg["dataset_path"], cfg.get("dataset_name") or "default")
    absent = {key for key in _SPLIT_KEYS if cfg.get(key) is not None and cfg[key] not in built}
    evaluated = cfg.get("test_split") or cfg.get("validation_split")
    if evaluated is None or evaluated not in built:
        raise BenchmarkError(f"{leaf}: the offline items lack its evaluation split {evaluated!r}")
    few = shots if shots is not None else cfg.get("num_fewshot") or 0
    if few > 0 and not (cfg.get("fewshot_config") or {}).get("samples"):
        source = next(
            (
                key
                for key in ("fewshot_split", "training_split", "validation_split", "test_split")
                if cfg.get(key) is not None
            ),
            None,
        )
        if source in absent:
            raise BenchmarkError(
                f"{leaf}: lm-eval draws its {few} few-shot examples from the "
                f"{cfg[source]!r} split, which the offline items lack; run it 0-shot"
            )
    overrides = {
        "dataset_path": str(dataset_path(folder, manifest, cfg["dataset_path"])),
        **dict.fromkeys(absent),
    }
    if cache is not None:
        overrides["dataset_kwargs"] = {**(cfg.get("dataset_kwargs") or {}), "cache_dir": str(cache)}
    return overrides


def offline_group(
    plan: Plan, folder: Path, manifest: dict, shots: int | None, cache: Path | None = None
) -> dict:
    """The lm-eval group config that runs an offline benchmark: the stock task(s) as members, their data
    overridden (lm-eval merges a member's keys into the stock config). Its name is the benchmark's for a
    group defined here, else ``spag_offline__<name>`` around the stock task or group. ``cache``: the
    ``datasets`` cache to prepare the items in (see :func:`data_cache`)."""
    if plan.kind == "ours":
        metric, members = GROUPS[plan.name]
        return {
            "group": plan.name,
            "task": [
                {"task": leaf, **_overrides(plan, leaf, folder, manifest, shots, cache)} for leaf in members
            ],
            "aggregate_metric_list": [{"metric": metric, "aggregation": "mean", "weight_by_size": True}],
            "metadata": {"version": 1.0},
        }
    overrides: dict = {}
    for leaf in plan.leaves:
        mine = _overrides(plan, leaf, folder, manifest, shots, cache)
        if overrides and mine != overrides:
            raise BenchmarkError(f"{plan.name}: its tasks need different offline settings")
        overrides = mine
    return {"group": f"spag_offline__{plan.name}", "task": [{plan.kind: plan.name, **overrides}]}


def data_cache(stamp: str) -> Path:
    """The ``datasets`` cache for offline items whose :func:`~spag.evaluate.benchmark_data.data_hash` is
    ``stamp``. ``datasets`` keys its own cache of a local folder by the folder's name and file names only:
    another folder of the same name, other items in it or a damaged file would be served the items prepared
    first. One cache per content reads what the folder holds."""
    import datasets.config

    return Path(datasets.config.HF_DATASETS_CACHE) / "spag-benchmark-data" / stamp[:32]


def check_items(plan: Plan, loaded, folder: Path, manifest: dict) -> tuple[int, int]:
    """(items read, items the manifest lists) over the evaluation splits of an offline benchmark's loaded
    tasks; BenchmarkError naming the split file when the two differ."""
    read = listed = 0
    for task in _leaf_objects(loaded):
        cfg = task.config
        hub_id = plan.leaves.get(task.task_name, {}).get("dataset_path") or next(iter(plan.datasets))
        config = cfg.dataset_name or "default"
        split = cfg.test_split or cfg.validation_split
        have = len(task.dataset[split])
        want = manifest["datasets"][hub_id]["configs"][config][split]["items"]
        if have != want:
            where = folder / manifest["datasets"][hub_id]["folder"] / config / f"{split}.parquet"
            raise BenchmarkError(
                f"{plan.name}: {where} holds {have} items, but its manifest lists {want}: "
                "rebuild the folder with `spag benchmark-data`"
            )
        read, listed = read + have, listed + want
    return read, listed


def datasets_by_task(tasks: Sequence[str] | None) -> dict[str, list[str]]:
    """The offline datasets (hub ids) each of the paper-suite benchmarks ``tasks`` reads (default: the
    whole suite); a benchmark read from the hub reads none."""
    names = [_parse_task(spec)[0] for spec in tasks] if tasks else list(PAPER_TASKS)
    manager = stock_manager(names)
    return {name: sorted(plan_task(manager, name, None, None).datasets) for name in names}


def datasets_for(tasks: Sequence[str] | None) -> list[str]:
    """The offline datasets (hub ids) the paper-suite benchmarks ``tasks`` read, together."""
    return sorted({d for found in datasets_by_task(tasks).values() for d in found})


def check_tasks(suite: str, tasks: Sequence[str] | None) -> None:
    """BenchmarkError naming the first of ``tasks`` that ``suite`` has not: the local suite's shipped tasks,
    else lm-eval's tasks and groups (and the groups defined here). Nothing is loaded or downloaded."""
    names = [_parse_task(spec)[0] for spec in tasks or ()]
    if suite == "local":
        known = local_tasks()
        unknown = [name for name in names if name not in known]
        if unknown:
            raise BenchmarkError(f"{unknown[0]!r} is not a task of the local suite ({', '.join(known)})")
        return
    if names:
        manager = stock_manager(names)
        for name in names:
            _leaves(manager, name)


@dataclass(frozen=True)
class SuiteHere:
    """What a ``suite`` setting runs on this machine (:func:`suite_here`)."""

    suite: str  # paper or local
    datasets: tuple[str, ...] | None = ()  # the offline datasets whose items can be had (None: all it reads)
    missing: tuple[str, ...] = ()  # the pinned artifacts of the others (not cached, no index)
    runnable: bool = True  # whether any benchmark of the paper suite can run here


def suite_here(
    suite: str, tasks: Sequence[str] | None = None, data: str | os.PathLike | None = None
) -> SuiteHere:
    """What ``suite`` runs here, decided in this one place for ``spag benchmark``, the ``benchmark_data``
    stage and the preflight: local and paper are themselves; auto is the paper suite where any of its
    benchmarks can run here, else the local suite (``tasks`` name benchmarks of the paper suite: auto with
    tasks is the paper suite).

    A benchmark can run when its offline items can be had (from ``data``, a ``spag benchmark-data`` folder;
    else the artifact cache, or the package index, when it can be reached), or when it reads the hub and
    the hub can be reached or holds its datasets. The package index is asked first: when it answers, every
    item can be had and nothing else is looked at. BenchmarkError for a task lm-eval does not know."""
    if suite not in SUITES:
        raise BenchmarkError(f"unknown suite {suite!r} (choose from {', '.join(SUITES)})")
    if suite == "local":
        return SuiteHere("local")
    if data is None and index_reachable():
        return SuiteHere("paper", None)
    names = [_parse_task(spec)[0] for spec in tasks] if tasks else list(PAPER_TASKS)
    manager = stock_manager(names)
    plans = [plan_task(manager, name, None, None) for name in names]
    wanted = sorted({d for plan in plans for d in plan.datasets})
    if data is not None:
        held = set(read_manifest(data)["datasets"])
        at_hand, missing = [d for d in wanted if d in held], []
    else:
        at_hand = [d for d in wanted if cached(DATASETS[d].artifact) is not None]
        missing = sorted({DATASETS[d].artifact.requirement for d in wanted if d not in at_hand})
    runnable = any(plan.offline and plan.datasets <= set(at_hand) for plan in plans) or _hub_can_serve(
        [plan for plan in plans if not plan.offline]
    )
    here = "local" if suite == "auto" and not tasks and not runnable else "paper"
    return SuiteHere(here, tuple(at_hand), tuple(missing), runnable)


def _hub_can_serve(plans: Sequence[Plan]) -> bool:
    """Whether any of ``plans`` (benchmarks read from the hub) can run: the hub answers, or holds a copy."""
    if not plans:
        return False
    if not offline_requested() and hub_reachable():
        return True
    return any(
        len(cached_datasets(ids)) == len(ids)
        for ids in (sorted({str(cfg.get("dataset_path")) for cfg in plan.leaves.values()}) for plan in plans)
    )


def datasets_here(suite: str, tasks: Sequence[str] | None = None) -> list[str]:
    """The offline datasets the ``benchmark_data`` stage builds for ``suite``: none where the local suite
    runs (:func:`suite_here`), else those of ``tasks`` whose items can be had here."""
    here = suite_here(suite, tasks)
    if here.suite == "local":
        return []
    return datasets_for(tasks) if here.datasets is None else list(here.datasets)


def obtain_data(
    plans: Sequence[Plan], data: str | os.PathLike | None, workdir: Path, say=print
) -> tuple[Path | None, dict | None, dict[str, str]]:
    """(folder, manifest, {benchmark: why it is skipped}) for the offline benchmarks of ``plans``.

    ``data``: a ``spag benchmark-data`` folder; None builds one in ``workdir`` from the cached artifacts
    (fetched from the package index when missing). A benchmark whose items cannot be had is skipped.
    """
    needed = {d for plan in plans for d in plan.datasets}
    skipped: dict[str, str] = {}
    if not needed:
        return None, None, skipped
    if data is not None:
        folder, manifest = Path(data), read_manifest(data)
        for plan in plans:
            missing = sorted(plan.datasets - set(manifest["datasets"]))
            if missing:
                skipped[plan.name] = f"{missing[0]} is not in {folder} (build it with `spag benchmark-data`)"
        return folder, manifest, skipped
    usable = set()
    for artifact in {DATASETS[d].artifact for d in needed}:
        try:
            fetch_artifact(artifact, say=say)
            usable |= {d for d in needed if DATASETS[d].artifact == artifact}
        except ArtifactError as exc:
            for plan in plans:
                if any(DATASETS[d].artifact == artifact for d in plan.datasets):
                    skipped[plan.name] = str(exc)
    if not usable:
        return None, None, skipped
    folder = workdir / "benchmark-data"
    return folder, build_benchmark_data(folder, sorted(usable), say=say), skipped


# ------------------------------------------------------------------------------------ the results


def _leaf_tasks(name: str, group_subtasks: Mapping[str, Sequence[str]]) -> list[str]:
    """The leaf tasks of a task or group (groups nest: mmlu -> mmlu_stem -> mmlu_anatomy)."""
    if name not in group_subtasks or not group_subtasks[name]:
        return [name]
    leaves: list[str] = []
    for child in group_subtasks[name]:
        leaves.extend(_leaf_tasks(child, group_subtasks))
    return leaves


def pick_metric(entry: Mapping, wanted: str | None) -> str:
    """The ``metric,filter`` key to report from one lm-eval results entry."""
    keys = [k for k in entry if "," in k and "_stderr," not in k]
    if wanted is not None:
        if wanted in entry:
            return wanted
        raise BenchmarkError(f"metric {wanted!r} not in lm-eval's results (has {', '.join(keys)})")
    for metric in _PREFERRED_METRICS:
        for key in keys:
            if key.split(",")[0] == metric:
                return key
    if not keys:
        raise BenchmarkError("lm-eval returned no metric")
    return keys[0]


def _as_number(value) -> float:
    if isinstance(value, (list, tuple)):  # some metrics log (prediction, reference) pairs per sample
        raise BenchmarkError(f"per-sample value {value!r} is not a score")
    return float(value)


def task_result(results: Mapping, name: str, metric: str | None, num_fewshot: int | None) -> dict:
    """One benchmark's score and its per-sample results from a ``simple_evaluate`` output (a sample's
    ``doc_id`` is its item's index in the task's evaluation split, also when lm-eval ran a sample of them)."""
    entry = results["results"][name]
    key = pick_metric(entry, metric)
    metric_name, _, filter_name = key.partition(",")
    samples, chance = [], []
    for leaf in _leaf_tasks(name, results.get("group_subtasks", {})):
        choice_task = results.get("configs", {}).get(leaf, {}).get("output_type") == "multiple_choice"
        for sample in results.get("samples", {}).get(leaf, []):
            if sample.get("filter", "none") != filter_name or metric_name not in sample:
                continue
            samples.append(
                {
                    "benchmark": name,
                    "task": leaf,
                    "doc_id": int(sample["doc_id"]),
                    "correct": _as_number(sample[metric_name]),
                }
            )
            if choice_task and sample.get("filtered_resps"):
                chance.append(1.0 / len(sample["filtered_resps"]))  # one log-likelihood per choice
    stderr = entry.get(f"{metric_name}_stderr,{filter_name}")
    shots = results.get("n-shot", {})
    leaf_shots = {shots.get(leaf) for leaf in _leaf_tasks(name, results.get("group_subtasks", {}))} - {None}
    chance_level = sum(chance) / len(chance) if chance and len(chance) == len(samples) else None
    return {
        "metric": metric_name if filter_name == "none" else key,
        "score": float(entry[key]),
        "stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
        "n": len(samples),
        "num_fewshot": int(next(iter(leaf_shots))) if len(leaf_shots) == 1 else num_fewshot,
        # The expected score of guessing uniformly (multiple-choice tasks): a small model may sit there.
        **(
            {"chance": chance_level, "at_chance": at_chance([s["correct"] for s in samples], chance_level)}
            if chance_level is not None
            else {}
        ),
        "samples": samples,
    }


def at_chance(correct: Sequence[float], chance: float, alpha: float = 0.05) -> bool:
    """Whether a score is indistinguishable from guessing: the one-sided exact binomial test of "better
    than ``chance``" does not reject at level ``alpha``."""
    from scipy.stats import binomtest

    hits = round(sum(correct))
    return bool(binomtest(hits, len(correct), chance, alternative="greater").pvalue >= alpha)


def geometric_mean(scores: Sequence[float]) -> float:
    """The paper's summary of several benchmarks; 0 when any score is 0."""
    from scipy.stats import gmean

    if not scores:
        raise ValueError("no scores")
    with np.errstate(divide="ignore"):  # log(0): the mean is 0, as it should be
        return float(gmean(scores))


def samples_path(output: str | os.PathLike) -> Path:
    """Where the per-sample results of ``output`` (a metrics JSON) go: ``NAME.samples.jsonl``."""
    output = Path(output)
    return output.with_name(output.stem + ".samples.jsonl")


# ----------------------------------------------------------------------------------------- running


def _parse_task(spec: str) -> tuple[str, str | None]:
    """``name`` or ``name:metric,filter``."""
    name, _, metric = spec.partition(":")
    return name.strip(), (metric.strip() or None)


@dataclass
class Chosen:
    """The suite that runs and its loaded tasks, by benchmark name."""

    suite: str
    manager: object
    table: dict[str, tuple[str | None, int | None]]  # benchmark -> (metric, few-shot)
    objects: dict[str, object] = field(default_factory=dict)
    offline: dict[str, bool] = field(default_factory=dict)  # whether a benchmark's run must stay offline
    labels: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    data_stamp: str | None = (
        None  # the offline items' content hash (data_hash), part of their benchmarks' stamps
    )
    from_data: set[str] = field(default_factory=set)  # the benchmarks that read the offline items
    items: dict[str, tuple[int, int]] = field(
        default_factory=dict
    )  # benchmark -> (items read, in the manifest)


def _load(manager, name: str, spec: str, where: str | None = None) -> object:
    """The Task or Group ``name`` that loading ``spec`` (its name, or a group around it) builds, or
    BenchmarkError (naming ``where`` its items are, when given)."""
    try:
        loaded = manager.load([spec])
    except Exception as exc:  # datasets raises many types for a missing dataset or no network
        source = f" from {where}" if where else ""
        raise BenchmarkError(
            f"could not load the data of {name!r}{source}: {exc.__class__.__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    found = loaded["groups"].get(name) or loaded["tasks"].get(name)
    if found is None:
        raise BenchmarkError(
            f"{name!r} is a tag, not a task or group; name its tasks: " + ", ".join(sorted(loaded["tasks"]))
        )
    return found


def _local(tasks: Sequence[str] | None, workdir: Path) -> Chosen:
    from lm_eval.tasks import TaskManager

    known = local_tasks()
    table = {}
    for spec in tasks or known:
        name, metric = _parse_task(spec)
        table[name] = (metric or known.get(name, (None, None))[0], known.get(name, (None, None))[1])
    with offline_mode(True):
        # The shipped folder as it is (plain lm_eval can use it too); the prepared data stay in workdir.
        manager = TaskManager(
            include_path=str(LOCAL_TASKS_DIR),
            include_defaults=False,
            metadata={"cache_dir": str(workdir / "datasets-cache")},
        )
        chosen = Chosen("local", manager, table)
        for name in table:
            if name not in manager.all_tasks:
                raise BenchmarkError(f"unknown lm-eval task {name!r}")
            chosen.objects[name] = _load(manager, name, name)
            chosen.offline[name] = True
            chosen.labels[name] = name
            chosen.sources[name] = "spag (synthetic, shipped)"
    return chosen


def _paper(tasks: Sequence[str] | None, workdir: Path, data, num_fewshot: int | None, say=print) -> Chosen:
    specs = [_parse_task(spec) for spec in tasks] if tasks else [(name, None) for name in PAPER_TASKS]
    names = [name for name, _ in specs]
    plans = [plan_task(stock_manager(names), name, metric, num_fewshot) for name, metric in specs]
    folder, manifest, skipped = obtain_data([p for p in plans if p.offline], data, workdir, say=say)
    read = [p for p in plans if p.offline and p.name not in skipped]
    stamp = data_hash(folder, manifest, {d for p in read for d in p.datasets}) if read else None
    # The offline benchmarks as group YAMLs in a folder of their own (as `lm_eval --include_path` takes it).
    generated = workdir / "lm_eval_tasks"
    generated.mkdir(parents=True, exist_ok=True)
    groups = {}
    for plan in read:
        config = offline_group(plan, folder, manifest, plan.shots, data_cache(stamp))
        (generated / f"{config['group']}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        groups[plan.name] = config["group"]
    chosen = Chosen(
        "paper",
        stock_manager(names, [generated]),
        {p.name: (p.metric, p.shots) for p in plans},
        skipped=skipped,
        data_stamp=stamp,
    )
    # Asked only when a task reads the hub: a connection attempt can take seconds on a machine without network.
    hub_offline = any(not p.offline for p in plans) and (offline_requested() or not hub_reachable())
    for plan in plans:
        if plan.name in chosen.skipped:
            continue
        chosen.labels[plan.name] = plan.label
        if plan.offline:
            chosen.sources[plan.name] = ", ".join(
                sorted({manifest["datasets"][d]["source"] for d in plan.datasets})
            )
            with offline_mode(True):
                where = ", ".join(str(dataset_path(folder, manifest, d)) for d in sorted(plan.datasets))
                chosen.objects[plan.name] = _load(chosen.manager, plan.name, groups[plan.name], where)
            chosen.items[plan.name] = check_items(plan, chosen.objects[plan.name], folder, manifest)
            chosen.offline[plan.name] = True
            chosen.from_data.add(plan.name)
            continue
        hub_ids = sorted({str(cfg.get("dataset_path")) for cfg in plan.leaves.values()})
        if hub_offline and len(cached_datasets(hub_ids)) < len(hub_ids):
            chosen.skipped[plan.name] = (
                f"reads {', '.join(hub_ids)} from the Hugging Face hub, which cannot be "
                "reached (offline) and has no copy in the cache"
            )
            continue
        chosen.sources[plan.name] = "Hugging Face hub: " + ", ".join(hub_ids)
        with offline_mode(hub_offline):
            chosen.objects[plan.name] = _load(chosen.manager, plan.name, plan.name)
        chosen.offline[plan.name] = hub_offline
    chosen.table = {name: chosen.table[name] for name in chosen.objects}
    return chosen


def choose_suite(
    suite: str,
    tasks: Sequence[str] | None,
    workdir: Path,
    say=print,
    *,
    data=None,
    num_fewshot: int | None = None,
) -> Chosen:
    """The suite that runs (``auto``: the paper suite where any of its tasks can run, else the local one)
    with its tasks loaded; a task of the paper suite whose items cannot be had is skipped, with why."""
    here = suite_here(suite, tasks, data)
    if here.suite == "local":
        if suite == "auto":
            say(
                f"benchmark: no task of the paper suite can run here ({_why_none(here)}): running the local suite"
            )
        return check_metrics(_local(tasks, workdir), tasks)
    chosen = _paper(tasks, workdir, data, num_fewshot, say=say)
    for name, why in chosen.skipped.items():
        say(f"benchmark: {name} skipped: {why}")
    if chosen.objects:
        return check_metrics(chosen, tasks)
    if suite == "auto" and not tasks:
        say("benchmark: no task of the paper suite can run here: running the local suite")
        return _local(None, workdir)
    raise BenchmarkError(
        "no task of the paper suite can run: "
        + "; ".join(f"{name}: {why}" for name, why in chosen.skipped.items())
    )


def _why_none(here: SuiteHere) -> str:
    items = (
        f"the items of {', '.join(here.missing)} are not in {cache_dir()} and the package index cannot be "
        "reached"
        if here.missing
        else "its offline items are not in the data folder"
    )
    return f"{items}; the hub, which the others read, cannot be reached"


def reported_metrics(loaded) -> set[str]:
    """The ``metric,filter`` keys lm-eval's results will hold for a loaded task or group: each leaf's
    metrics under each of its filters; for a group, only the metrics it aggregates."""
    keys = {
        (metric, ensemble.name)
        for task in _leaf_objects(loaded)
        for metric in task._metric_fn_list
        for ensemble in task._filters
    }
    if hasattr(loaded, "get_all_tasks"):  # a group reports what it aggregates, nothing else
        aggregated = {agg.metric: agg.filter_list for agg in loaded.aggregate_metric_list or []}
        keys = {
            (metric, name)
            for metric, name in keys
            if metric in aggregated and (aggregated[metric] is None or name in aggregated[metric])
        }
    return {f"{metric},{name}" for metric, name in keys}


def check_metrics(chosen: Chosen, tasks: Sequence[str] | None) -> Chosen:
    """BenchmarkError, before any task runs, for a metric named in ``tasks`` (``name:metric,filter``) that
    its task does not report, and for a task whose scores lm-eval aggregates with scikit-learn where it is
    not installed (requirements/excludes.txt leaves it out: no task of spag's suites needs it)."""
    if importlib.util.find_spec("sklearn") is None:
        from lm_eval.api import metrics

        by_scikit_learn = {metrics.f1_score: "F1", metrics.matthews_corrcoef: "Matthews correlation"}
        for name, loaded in chosen.objects.items():
            needs = sorted(
                {
                    by_scikit_learn[fn]
                    for task in _leaf_objects(loaded)
                    for fn in task.aggregation().values()
                    if fn in by_scikit_learn
                }
            )
            if needs:
                raise BenchmarkError(
                    f"{name}: lm-eval computes its {' and '.join(needs)} with scikit-learn, which "
                    "spag's install leaves out: pip install scikit-learn"
                )
    for name, metric in map(_parse_task, tasks or ()):
        if metric is None or name not in chosen.objects:
            continue
        known = reported_metrics(chosen.objects[name])
        if metric not in known:
            raise BenchmarkError(
                f"{name}: no metric {metric!r}; it reports " + (", ".join(sorted(known)) or "none")
            )
    return chosen


def sample_indices(task_name: str, size: int, limit: int | None) -> list[int] | None:
    """The items of a task's evaluation split that ``limit`` picks: the first ``limit`` of a permutation
    seeded by the task's name, in split order (None: every item)."""
    if limit is None or limit >= size:
        return None
    order = np.random.default_rng([ITEM_SAMPLE_SEED, zlib.crc32(task_name.encode())]).permutation(size)
    return sorted(int(i) for i in order[:limit])


def _leaf_objects(obj) -> list:
    return list(obj.get_all_tasks()) if hasattr(obj, "get_all_tasks") else [obj]


def _fingerprint(
    model: str,
    suite: str,
    task: str,
    limit,
    num_fewshot,
    apply_chat_template,
    *,
    seed: int = 0,
    dtype: str | None = None,
    batch_size: int | str = 8,
    device: str | None = None,
    data: str | None = None,
) -> dict:
    """What a task's score depends on: the model's content (not its path), the task's data, every setting."""
    import lm_eval

    stamp = {
        "model": model_fingerprint(model),
        "suite": suite,
        "task": task,
        "limit": limit,
        "num_fewshot": num_fewshot,
        "apply_chat_template": apply_chat_template,
        "seed": seed,
        "dtype": dtype,
        "batch_size": batch_size,
        "device": device,
        "lm_eval": getattr(lm_eval, "__version__", ""),
        "items": ITEM_SAMPLE_SEED,
    }
    if suite == "local":
        stamp["data"] = model_fingerprint(LOCAL_TASKS_DIR)  # the shipped task files, hashed like a model
    elif data is not None:
        stamp["data"] = data  # the offline items' manifest
    return stamp


@contextlib.contextmanager
def _no_git_hash() -> Iterator[None]:
    """lm-eval stamps each run with ``git describe`` of the working directory, whose ``fatal: not a git
    repository`` reaches the terminal once per task outside a repository. spag keeps no such stamp (its
    results carry their own fingerprint): the call is left out while a task runs."""
    import lm_eval.evaluator

    before = lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.get_git_commit_hash = lambda: None
    try:
        yield
    finally:
        lm_eval.evaluator.get_git_commit_hash = before


def _build_lm(model: str, batch_size, device: str | None, dtype: str | None):
    from spag.evaluate.shared_prefix import SharedPrefixLM  # lm-eval's HF model: torch and transformers

    device = pick_device(device)
    if dtype is None:
        dtype = "float32" if device == "cpu" else "auto"
    return SharedPrefixLM.create_from_arg_obj(
        {"pretrained": str(model), "dtype": dtype, "trust_remote_code": False},
        {"batch_size": batch_size, "device": device},
    )


def run_benchmark(
    model: str,
    tasks: Sequence[str] | None = None,
    suite: str = "auto",
    limit: int | None = None,
    output: str | os.PathLike | None = None,
    *,
    batch_size: int | str = 8,
    num_fewshot: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    apply_chat_template: bool = False,
    seed: int = 0,
    samples_out: str | os.PathLike | None = None,
    data: str | os.PathLike | None = None,
    say=print,
    show_progress: bool = True,
) -> dict:
    """Score ``model`` on the chosen suite and return the metrics (written to ``output`` when given).

    ``tasks``: lm-eval task or group names (``name:metric,filter`` picks the metric); default: the
    whole suite. ``limit``: a fixed sample of that many items per task (see :func:`sample_indices`).
    ``num_fewshot`` overrides every task's default number of examples. ``data``: a ``spag
    benchmark-data`` folder with the paper suite's offline items (default: built in a temporary folder
    from the cached artifacts). The per-sample results go to ``samples_out`` (default
    ``samples_path(output)``); the metrics name that file (``samples_file``, relative to the metrics
    file's folder); ``replace`` says what an existing one of the two may be replaced by
    (:func:`spag.runtime.atomic.atomic_path`). Returns ``{"suite", "model", "tasks": {name: {"label", "source", "metric", "score",
    "stderr", "n", "of", "num_fewshot", "chance", "at_chance"}}, "geometric_mean", "skipped", ...}``.
    """
    output = Path(output) if output is not None else None
    parts = output.with_name(output.name + ".parts") if output is not None else None
    with tempfile.TemporaryDirectory(prefix="spag-benchmark-") as workdir:
        chosen = choose_suite(suite, tasks, Path(workdir), say=say, data=data, num_fewshot=num_fewshot)
        lm = None
        results: dict[str, dict] = {}
        desc = f"benchmark ({chosen.suite})"
        bar = progress(total=len(chosen.table), desc=desc, unit="task", disable=not show_progress)
        for name, (metric, default_shots) in chosen.table.items():
            shots = num_fewshot if num_fewshot is not None else default_shots
            stamp = _fingerprint(
                model,
                chosen.suite,
                name,
                limit,
                shots,
                apply_chat_template,
                seed=seed,
                dtype=dtype,
                batch_size=batch_size,
                device=device,
                data=chosen.data_stamp if name in chosen.from_data else None,
            )
            done = _read_part(parts, name, stamp, say)
            if done is None:
                if lm is None:
                    lm = _build_lm(model, batch_size, device, dtype)
                bar.set_postfix_str(name)
                done = _score_task(
                    lm,
                    chosen,
                    name,
                    metric,
                    shots,
                    limit=limit,
                    seed=seed,
                    apply_chat_template=apply_chat_template,
                )
                _write_part(parts, name, stamp, done)
            results[name] = done
            bar.update(1)
        bar.close()
    metrics = _suite_metrics(chosen, model, results, limit)
    if output is not None:
        _write_benchmark(output, samples_out, metrics, results, parts)
    return metrics


def _score_task(
    lm,
    chosen,
    name: str,
    metric: str,
    shots: int | None,
    *,
    limit: int | None,
    seed: int,
    apply_chat_template: bool,
) -> dict:
    """One task of the chosen suite scored by lm-eval on ``lm``: its result (:func:`task_result`) with its
    label, source and size (and, for offline items, what they held against their manifest)."""
    import lm_eval

    sizes = {t.task_name: len(t.eval_docs) for t in _leaf_objects(chosen.objects[name])}
    picked = {leaf: idx for leaf, n in sizes.items() if (idx := sample_indices(leaf, n, limit)) is not None}
    with offline_mode(chosen.offline[name]), _no_git_hash():
        raw = lm_eval.simple_evaluate(
            model=lm,
            tasks=[chosen.objects[name]],
            num_fewshot=shots,
            samples=picked or None,
            log_samples=True,
            task_manager=chosen.manager,
            apply_chat_template=apply_chat_template,
            bootstrap_iters=1000,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )
    done = task_result(raw, name, metric, shots)
    done.update(label=chosen.labels[name], source=chosen.sources[name], of=sum(sizes.values()))
    if name in chosen.items:  # what the offline items held, checked against their manifest
        done["items_read"], done["items_in_manifest"] = chosen.items[name]
    return done


def _suite_metrics(chosen, model: str, results: dict[str, dict], limit: int | None) -> dict:
    scores = [r["score"] for r in results.values()]
    metrics = {
        "suite": chosen.suite,
        "model": str(model),
        "tasks": {name: {k: v for k, v in r.items() if k != "samples"} for name, r in results.items()},
        "geometric_mean": geometric_mean(scores),
        "limit": limit,
        "skipped": chosen.skipped,
    }
    if all("chance" in r for r in results.values()):
        metrics["chance_geometric_mean"] = geometric_mean([r["chance"] for r in results.values()])
    return metrics


def _write_benchmark(
    output: Path, samples_out, metrics: dict, results: dict[str, dict], parts: Path | None
) -> None:
    """The per-sample results, then the metrics naming their file; the finished tasks' parts removed."""
    samples_out = Path(samples_out) if samples_out is not None else samples_path(output)
    metrics["samples_file"] = os.path.relpath(samples_out.resolve(), output.resolve().parent)
    write_jsonl_atomic(samples_out, (s for r in results.values() for s in r["samples"]))
    write_json_atomic(output, metrics)
    if parts is not None and parts.exists():
        for name in results:  # the parts this run kept or wrote, then the folder if nothing else is left
            _part_file(parts, name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            parts.rmdir()


def _part_file(parts: Path, name: str) -> Path:
    return parts / ("".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) + ".json")


def _read_part(parts: Path | None, name: str, stamp: dict, say=print) -> dict | None:
    """A finished task's result kept by an interrupted run, if it was computed for exactly ``stamp``."""
    if parts is None or not _part_file(parts, name).exists():
        return None
    try:
        saved = json.loads(_part_file(parts, name).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        say(f"note: {_part_file(parts, name)} is unreadable; running {name} again")
        return None
    if saved.get("fingerprint") != stamp:
        say(
            f"note: the kept result of {name} in {parts} was computed for something else "
            f"({differences(saved.get('fingerprint') or {}, stamp)}); running it again"
        )
        return None
    say(f"note: {name} kept from an interrupted run ({parts})")
    return saved["result"]


def _write_part(parts: Path | None, name: str, stamp: dict, result: dict) -> None:
    if parts is not None:  # removed, each part this run wrote, when the run is written
        write_json_atomic(_part_file(parts, name), {"fingerprint": stamp, "result": result})
