"""Issue 48, a core that travels light: the GPU check (bench/gpu.py) and the commands a GPU node runs need none
of the packages a GPU node's image lacks and only the pipeline's bookkeeping, analysis and benchmarks use.

Everything runs here at toy size (a tiny random model, CPU, float32) from the source tree alone (PYTHONPATH,
spag's installed copy out of sight), with tests/light_core/sitecustomize.py on the path: every process,
children included, writes the modules it loaded when it exits. The packages the code has a way around are
absent, as on the image (:data:`ABSENT`); the others are installed here and must go unused
(:func:`light_environment`).

The whole check runs so in tests/test_bench.py (each of its 16 parts, playing, training, ZeRO-3 and the
online step among them, in one run). Here: the preflight, in the fast tier, and `spag train` with ZeRO-3
under torchrun, the command a node runs and the check does not (its ZeRO-3 part trains in its own process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spag.runtime.atomic import write_jsonl_atomic
from spag.testing import load_script, make_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent
SHIM = Path(__file__).resolve().parent / "light_core"
# Not on the image, and no part of playing, judging or training needs them.
HEAVY = ("polars", "duckdb", "dvc", "dvclive", "lm_eval", "wordfreq", "openai")
# Not on the image either, and the parts do without them: the preflight leaves the benchmark suite unchecked
# (a note), play takes the shipped words, TRL trains without vLLM (which would bring its API server's openai).
ABSENT = ("lm_eval", "wordfreq", "vllm")

PREFLIGHT = """
import json, sys
from pathlib import Path
import spag
from spag.config import load_settings
from spag.models.devices import cuda_unusable, nvidia_gpus, torch_cuda, visible_gpus
from spag.pipeline.preflight import pipeline_problems, python_problem
root = Path("{root}")
notes = []
for overrides in ([], ["paper-toy.yaml"]):
    settings = load_settings(root / "configs" / "paper.yaml", overrides=[root / "configs" / o for o in overrides])
    notes += pipeline_problems(settings, root, "base_model")[1]
torch_cuda(), cuda_unusable(), nvidia_gpus(), visible_gpus(), python_problem()
print(json.dumps({"spag": spag.__file__, "notes": notes}))
"""


# The parts run here, each as a node runs it (at toy size): the preflight, and `spag train` with ZeRO-3 under
# torchrun on bench/train.py's synthetic game rows, as the check trains on.
PARTS = {
    "preflight": [sys.executable, "-c", PREFLIGHT],
    "zero3": [
        sys.executable,
        "-m",
        "spag.cli",
        "train",
        "--method",
        "offline-po",
        "--ref-on-the-fly",
        "--model",
        "{model}",
        "--data",
        "{rows}",
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--grad-accum",
        "1",
        "--max-length",
        "1024",
        "--warmup-ratio",
        "0",
        "--logging-steps",
        "1",
        "--no-live",
        "--device",
        "cpu",
        "--no-bf16",
        "-o",
        "{work}/out",
        "--deepspeed",
        str(ROOT / "configs" / "deepspeed_zero3.json"),
        "--launcher",
        "torchrun --standalone --nproc_per_node 1",
    ],
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model", heads=2)


def light_environment(reports: Path, cache: Path, plant: str = "") -> dict[str, str]:
    """What a process run as on the GPU image sets over this environment: the source tree and the shim on
    PYTHONPATH, spag's installed copy hidden, :data:`ABSENT` absent, no GPU, nothing from the hub or an index;
    each process writes the modules it loaded into ``reports`` (``plant``: see the shim)."""
    reports.mkdir(parents=True, exist_ok=True)
    return {
        "PYTHONPATH": f"{SHIM}{os.pathsep}{ROOT}",
        "SPAG_LIGHT_REPORT": str(reports),
        "SPAG_LIGHT_ABSENT": ",".join(ABSENT),
        "SPAG_LIGHT_UNINSTALLED": "spag",
        "SPAG_LIGHT_PLANT": plant,
        "CUDA_VISIBLE_DEVICES": "",
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PIP_NO_INDEX": "1",
        "SPAG_CACHE": str(cache),
    }


def heavy_loaded(reports: Path) -> dict[str, set]:
    """Per process that reported (its command line), the packages of :data:`HEAVY` it loaded."""
    loaded = {}
    for report in reports.glob("*.json"):
        found = json.loads(report.read_text())
        loaded[" ".join(found["argv"])[:120]] = set(found["modules"]) & set(HEAVY)
    assert loaded, "no process reported its modules"
    return loaded


def run_part(part: str, work: Path, model: Path | None = None, plant: str = "") -> tuple[str, dict[str, set]]:
    """Run one part; its stdout and, per process (its command line), the heavy packages it loaded."""
    command = PARTS[part]
    if "{rows}" in " ".join(command):  # bench/train.py's synthetic game rows, as the check trains on
        bench_train = load_script(ROOT / "bench" / "train.py", "bench_train")
        write_jsonl_atomic(work / "rows.jsonl", bench_train.synthetic_rows(4))
    for placeholder, value in (
        ("{model}", model),
        ("{root}", ROOT),
        ("{rows}", work / "rows.jsonl"),
        ("{work}", work),
    ):
        command = [c.replace(placeholder, str(value)) for c in command]
    reports = work / "reports"
    env = {**os.environ, **light_environment(reports, work / "cache", plant)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=work, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, heavy_loaded(reports)


def test_the_preflight_loads_none_of_the_heavy_packages(tmp_path):
    """From the tree, without lm-eval: the suite is not checked, and says so once per preset."""
    out, loaded = run_part("preflight", tmp_path)
    assert {argv: names for argv, names in loaded.items() if names} == {}
    told = json.loads(out.splitlines()[-1])
    assert Path(told["spag"]).is_relative_to(ROOT)
    assert (
        told["notes"]
        == [
            "evaluate.benchmark.suite (paper) not checked: lm-eval is not installed here, "
            "and the benchmark stages need it (pip install lm-eval)"
        ]
        * 2
    )


@pytest.mark.slow
def test_spag_train_with_zero3_under_torchrun_loads_none_of_the_heavy_packages(tiny, tmp_path):
    _, loaded = run_part("zero3", tmp_path, tiny)
    assert len(loaded) >= 3, loaded  # the command, torchrun and its worker
    assert {argv: names for argv, names in loaded.items() if names} == {}


def test_a_planted_import_is_seen(tmp_path):
    """The tests above bite: ``import polars`` planted in the preflight's module is reported."""
    _, loaded = run_part("preflight", tmp_path, plant="spag.pipeline.preflight:polars")
    assert list(loaded.values()) == [{"polars"}]
