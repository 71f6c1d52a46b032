"""Reasoning benchmarks through lm-evaluation-harness, with an offline fallback suite.

Two suites:

- ``paper``: the paper's benchmarks (MMLU 5-shot, BBH, ARC-easy, ARC-challenge, MuTual, WinoGrande,
  LogiQA2, PIQA) as lm-eval defines them; their datasets come from the Hugging Face hub or its cache.
- ``local``: four small multiple-choice tasks shipped in ``spag/evaluate/tasks`` (YAML + JSONL written
  by ``generate.py``), run with every hub access switched off. It measures the same way (lm-eval
  log-likelihood multiple choice) but is far smaller and easier than the paper's suite: a number to
  compare checkpoints of one run with, not to compare with the paper.

``auto`` runs the paper suite when its datasets can be had and the local one otherwise, and the result
says which ran. The score of each task is lm-eval's headline metric for it (table below); the summary
is the geometric mean over tasks, as in the paper. Per-sample results (one line per document: whether
the model got it right) are written beside the metrics for paired comparisons (``spag compare``).

A run resumes: each finished task is kept in ``<output>.parts/`` until the whole run is written, stamped
with the model's content hash (:mod:`spag.fingerprint`), the task data and every setting; a kept task
is reused only for the same stamp (a retrained model at the same path is run again, with a note).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

LOCAL_TASKS_DIR = Path(__file__).resolve().parent / "tasks"
SUITES = ("auto", "paper", "local")

# name -> (lm-eval metric key "metric,filter", few-shot examples; None keeps the task's own default).
# MuTual's r@1 is its accuracy; BBH is lm-eval's default "bbh" group (3-shot chain of thought, exact
# match of the extracted answer).
PAPER_TASKS: dict[str, tuple[str, int | None]] = {
    "mmlu": ("acc,none", 5),
    "bbh": ("exact_match,get-answer", None),
    "arc_easy": ("acc,none", 0),
    "arc_challenge": ("acc,none", 0),
    "mutual": ("r@1,none", 0),
    "winogrande": ("acc,none", 0),
    "logiqa2": ("acc,none", 0),
    "piqa": ("acc,none", 0),
}
# Tried in order for a task that is in neither table.
_PREFERRED_METRICS = ("acc", "exact_match", "r@1", "f1", "mcc")


class BenchmarkError(RuntimeError):
    """A benchmark could not run (unknown task, datasets unavailable): one line for the user."""


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
    from urllib.parse import urlparse

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = urlparse(endpoint).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


# Where each paper task's data comes from on the hub (lm-eval's dataset_path).
PAPER_DATASETS = {
    "mmlu": "cais/mmlu",
    "bbh": "SaylorTwift/bbh",
    "arc_easy": "allenai/ai2_arc",
    "arc_challenge": "allenai/ai2_arc",
    "mutual": "EleutherAI/mutual",
    "winogrande": "allenai/winogrande",
    "logiqa2": "baber/logiqa2",
    "piqa": "baber/piqa",
}


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
    """One benchmark's score and its per-sample results from a ``simple_evaluate`` output."""
    entry = results["results"][name]
    key = pick_metric(entry, metric)
    metric_name, _, filter_name = key.partition(",")
    samples, chance = [], []
    for leaf in _leaf_tasks(name, results.get("group_subtasks", {})):
        choice_task = results.get("configs", {}).get(leaf, {}).get("output_type") == "multiple_choice"
        for sample in results.get("samples", {}).get(leaf, []):
            if sample.get("filter", "none") != filter_name or metric_name not in sample:
                continue
            samples.append({"benchmark": name, "task": leaf, "doc_id": int(sample["doc_id"]),
                            "correct": _as_number(sample[metric_name])})
            if choice_task and sample.get("filtered_resps"):
                chance.append(1.0 / len(sample["filtered_resps"]))  # one log-likelihood per choice
    stderr = entry.get(f"{metric_name}_stderr,{filter_name}")
    shots = results.get("n-shot", {})
    leaf_shots = {shots.get(leaf) for leaf in _leaf_tasks(name, results.get("group_subtasks", {}))} - {None}
    return {
        "metric": metric_name if filter_name == "none" else key,
        "score": float(entry[key]),
        "stderr": float(stderr) if isinstance(stderr, (int, float)) else None,
        "n": len(samples),
        "num_fewshot": int(next(iter(leaf_shots))) if len(leaf_shots) == 1 else num_fewshot,
        # The expected score of guessing uniformly (multiple-choice tasks): a small model may sit there.
        **({"chance": sum(chance) / len(chance)} if chance and len(chance) == len(samples) else {}),
        "samples": samples,
    }


def geometric_mean(scores: Sequence[float]) -> float:
    """The paper's summary of several benchmarks; 0 when any score is 0."""
    import numpy as np
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


def _task_table(suite: str, tasks: Sequence[str] | None) -> dict[str, tuple[str | None, int | None]]:
    known: Mapping[str, tuple[str, int | None]] = PAPER_TASKS if suite == "paper" else local_tasks()
    if not tasks:
        return dict(known)
    table: dict[str, tuple[str | None, int | None]] = {}
    for spec in tasks:
        name, metric = _parse_task(spec)
        default_metric, shots = known.get(name, (None, None))
        table[name] = (metric or default_metric, shots)
    return table


def _task_manager(suite: str, workdir: Path):
    from lm_eval.tasks import TaskManager

    if suite == "local":
        # The shipped folder as it is (plain lm_eval can use it too); the prepared data stay in workdir.
        return TaskManager(include_path=str(LOCAL_TASKS_DIR), include_defaults=False,
                           metadata={"cache_dir": str(workdir / "datasets-cache")})
    return TaskManager()


def _load_tasks(task_manager, names: Sequence[str]) -> dict:
    """Build every task (downloading or reading its dataset); raise BenchmarkError if one fails."""
    objects = {}
    for name in names:
        if name not in task_manager.all_tasks:
            raise BenchmarkError(f"unknown lm-eval task {name!r}")
        try:
            loaded = task_manager.load([name])
        except Exception as exc:  # datasets raises many types for a missing dataset or no network
            raise BenchmarkError(f"could not load the data of {name!r}: {exc.__class__.__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
        objects[name] = loaded["groups"].get(name) or loaded["tasks"].get(name)
        if objects[name] is None:
            raise BenchmarkError(f"{name!r} is a tag, not a task or group; name its tasks: "
                                 + ", ".join(sorted(loaded["tasks"])))
    return objects


def choose_suite(suite: str, tasks: Sequence[str] | None, workdir: Path, say=print):
    """(suite, task manager, loaded tasks, offline) for ``auto``, ``paper`` or ``local``."""
    if suite not in SUITES:
        raise BenchmarkError(f"unknown suite {suite!r} (choose from {', '.join(SUITES)})")
    if suite in ("auto", "paper"):
        offline = offline_requested() or not hub_reachable()
        if suite == "auto" and offline and not tasks and not cached_datasets(set(PAPER_DATASETS.values())):
            say("benchmark: no network and none of the paper's datasets in the cache: "
                "running the local suite")
            suite = "local"
        else:
            table = _task_table("paper", tasks)
            try:
                with offline_mode(offline):
                    manager = _task_manager("paper", workdir)
                    return "paper", manager, table, _load_tasks(manager, list(table)), offline
            except BenchmarkError as exc:
                if suite == "paper":
                    raise
                say(f"benchmark: the paper's datasets are not available ({exc}): running the local suite")
                suite = "local"
    table = _task_table("local", tasks if suite == "local" else None)
    with offline_mode(True):
        manager = _task_manager("local", workdir)
        return "local", manager, table, _load_tasks(manager, list(table)), True


def _fingerprint(model: str, suite: str, task: str, limit, num_fewshot, apply_chat_template, *,
                 seed: int = 0, dtype: str | None = None, batch_size: int | str = 8,
                 device: str | None = None) -> dict:
    """What a task's score depends on: the model's content (not its path), the task's data, every setting."""
    import lm_eval

    from spag.fingerprint import model_fingerprint

    stamp = {"model": model_fingerprint(model), "suite": suite, "task": task, "limit": limit,
             "num_fewshot": num_fewshot, "apply_chat_template": apply_chat_template, "seed": seed,
             "dtype": dtype, "batch_size": batch_size, "device": device,
             "lm_eval": getattr(lm_eval, "__version__", "")}
    if suite == "local":
        stamp["data"] = model_fingerprint(LOCAL_TASKS_DIR)  # the shipped task files, hashed like a model
    return stamp


def _build_lm(model: str, batch_size, device: str | None, dtype: str | None):
    import lm_eval.api.registry

    from spag.modeling import pick_device

    device = pick_device(device)
    if dtype is None:
        dtype = "float32" if device == "cpu" else "auto"
    return lm_eval.api.registry.get_model("hf").create_from_arg_obj(
        {"pretrained": str(model), "dtype": dtype, "trust_remote_code": False},
        {"batch_size": batch_size, "device": device},
    )


def run_benchmark(model: str, tasks: Sequence[str] | None = None, suite: str = "auto",
                  limit: int | None = None, output: str | os.PathLike | None = None, *,
                  batch_size: int | str = 8, num_fewshot: int | None = None, device: str | None = None,
                  dtype: str | None = None, apply_chat_template: bool = False, seed: int = 0,
                  samples_out: str | os.PathLike | None = None, say=print,
                  show_progress: bool = True, replace: str = "no") -> dict:
    """Score ``model`` on the chosen suite and return the metrics (written to ``output`` when given).

    ``tasks``: lm-eval task or group names (``name:metric,filter`` picks the metric); default: the
    whole suite. ``num_fewshot`` overrides every task's default number of examples. The per-sample
    results go to ``samples_out`` (default ``samples_path(output)``); the metrics name that file
    (``samples_file``, relative to the metrics file's folder); ``replace`` says what an existing one of the
    two may be replaced by (:func:`spag.io.atomic_path`). Returns ``{"suite", "model", "tasks":
    {name: {"metric", "score", "stderr", "n", "num_fewshot"}}, "geometric_mean", ...}``.
    """
    import lm_eval

    from spag.console import progress
    from spag.io import write_json_atomic, write_jsonl_atomic
    from spag.outputs import remove_output_dir

    output = Path(output) if output is not None else None
    parts = output.with_name(output.name + ".parts") if output is not None else None
    with tempfile.TemporaryDirectory(prefix="spag-benchmark-") as workdir:
        chosen, manager, table, objects, offline = choose_suite(suite, tasks, Path(workdir), say=say)
        lm = None
        results: dict[str, dict] = {}
        bar = progress(total=len(table), desc=f"benchmark ({chosen})", unit="task", disable=not show_progress)
        for name, (metric, default_shots) in table.items():
            shots = num_fewshot if num_fewshot is not None else default_shots
            stamp = _fingerprint(model, chosen, name, limit, shots, apply_chat_template, seed=seed,
                                 dtype=dtype, batch_size=batch_size, device=device)
            done = _read_part(parts, name, stamp, say)
            if done is None:
                if lm is None:
                    lm = _build_lm(model, batch_size, device, dtype)
                bar.set_postfix_str(name)
                with offline_mode(offline):
                    raw = lm_eval.simple_evaluate(
                        model=lm, tasks=[objects[name]],
                        num_fewshot=shots, limit=limit, log_samples=True, task_manager=manager,
                        apply_chat_template=apply_chat_template, bootstrap_iters=1000,
                        random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                        fewshot_random_seed=seed,
                    )
                done = task_result(raw, name, metric, shots)
                _write_part(parts, name, stamp, done)
            results[name] = done
            bar.update(1)
        bar.close()

    scores = [r["score"] for r in results.values()]
    metrics = {
        "suite": chosen,
        "model": str(model),
        "tasks": {name: {k: v for k, v in r.items() if k != "samples"} for name, r in results.items()},
        "geometric_mean": geometric_mean(scores),
        "limit": limit,
    }
    if all("chance" in r for r in results.values()):
        metrics["chance_geometric_mean"] = geometric_mean([r["chance"] for r in results.values()])
    if output is not None:
        samples_out = Path(samples_out) if samples_out is not None else samples_path(output)
        metrics["samples_file"] = os.path.relpath(samples_out.resolve(), output.resolve().parent)
        write_jsonl_atomic(samples_out, (s for r in results.values() for s in r["samples"]), replace=replace)
        write_json_atomic(output, metrics, replace=replace)
        if parts is not None and parts.exists():
            remove_output_dir(parts)
    return metrics


def _part_file(parts: Path, name: str) -> Path:
    return parts / ("".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) + ".json")


def _read_part(parts: Path | None, name: str, stamp: dict, say=print) -> dict | None:
    """A finished task's result kept by an interrupted run, if it was computed for exactly ``stamp``."""
    from spag.fingerprint import differences

    if parts is None or not _part_file(parts, name).exists():
        return None
    try:
        saved = json.loads(_part_file(parts, name).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        say(f"note: {_part_file(parts, name)} is unreadable; running {name} again")
        return None
    if saved.get("fingerprint") != stamp:
        say(f"note: the kept result of {name} in {parts} was computed for something else "
            f"({differences(saved.get('fingerprint') or {}, stamp)}); running it again")
        return None
    say(f"note: {name} kept from an interrupted run ({parts})")
    return saved["result"]


def _write_part(parts: Path | None, name: str, stamp: dict, result: dict) -> None:
    from spag.io import write_json_atomic
    from spag.outputs import mark_output_dir, output_kind

    if parts is not None:
        if output_kind(parts) is None:  # spag's own: removed, what it wrote there, when the run is written
            mark_output_dir(parts, "benchmark")
        write_json_atomic(_part_file(parts, name), {"fingerprint": stamp, "result": result}, replace="any")
