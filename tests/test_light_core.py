"""Issue 48, a core that travels light: the parts of the GPU check (bench/gpu.py) need none of the packages a
GPU node's image lacks and only the pipeline's bookkeeping, analysis and benchmarks use.

Each part runs here at toy size (a tiny random model, CPU, float32) as the check runs it, from the source
tree alone (PYTHONPATH, spag's installed copy out of sight), with tests/light_core/sitecustomize.py on the
path: every process of the part, children included, writes the modules it loaded when it exits. The
packages the parts have a way around are absent, as on the image (:data:`ABSENT`); the others are installed
here and must go unused.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spag.runtime.atomic import write_jsonl_atomic
from spag.testing import make_tiny_checkpoint

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

ONLINE = """
import sys
from spag.config import Online, Reward, TrainConfig
from spag.play.engine import PlayConfig
from spag.train.online import OnlineGames, run_online
games = OnlineGames(play=PlayConfig.of(max_turns=1, max_new_tokens=6, temperature=1.0, seed=7),
                    online=Online(words_per_step=1, games_per_word=3), reward=Reward(keep_truncated=True))
config = TrainConfig(batch_size=3, max_steps=1, live=False, show_progress=False, logging_steps=1, warmup_ratio=0.0)
run_online(sys.argv[1], ["river"], sys.argv[2] + "/model", games=games, episodes_dir=sys.argv[2] + "/episodes",
           config=config)
"""


def _train(method: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "spag.cli",
        "train",
        "--method",
        method,
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
        *extra,
    ]


# The parts of the check, each as it runs there (at toy size).
PARTS = {
    "preflight": [sys.executable, "-c", PREFLIGHT],
    "play": [
        sys.executable,
        str(ROOT / "bench" / "play.py"),
        "--toy",
        "--sides",
        "batched",
        "--model",
        "{model}",
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--json",
    ],
    "offline-po": _train("offline-po", "--ref-on-the-fly"),
    "sft-kl": _train("sft-kl"),
    "zero3": _train(
        "offline-po",
        "--ref-on-the-fly",
        "--deepspeed",
        str(ROOT / "configs" / "deepspeed_zero3.json"),
        "--launcher",
        "torchrun --standalone --nproc_per_node 1",
    ),
    "online": [sys.executable, "-c", ONLINE, "{model}", "{work}"],
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model", heads=2)


def run_part(part: str, work: Path, model: Path | None = None, plant: str = "") -> tuple[str, dict[str, set]]:
    """Run one part of the check; its stdout and, per process (its command line), the heavy packages it
    loaded."""
    command = PARTS[part]
    reports = work / "reports"
    reports.mkdir(parents=True)
    if "{rows}" in " ".join(command):  # bench/train.py's synthetic game rows, as the check trains on
        spec = importlib.util.spec_from_file_location("bench_train", ROOT / "bench" / "train.py")
        bench_train = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench_train)
        write_jsonl_atomic(work / "rows.jsonl", bench_train.synthetic_rows(4))
    for placeholder, value in (
        ("{model}", model),
        ("{root}", ROOT),
        ("{rows}", work / "rows.jsonl"),
        ("{work}", work),
    ):
        command = [c.replace(placeholder, str(value)) for c in command]
    env = {
        **os.environ,
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
        "SPAG_CACHE": str(work / "cache"),
    }
    done = subprocess.run(command, capture_output=True, text=True, cwd=work, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = {}
    for report in reports.glob("*.json"):
        found = json.loads(report.read_text())
        loaded[" ".join(found["argv"])[:120]] = set(found["modules"]) & set(HEAVY)
    assert loaded, "no process reported its modules"
    return done.stdout, loaded


SLOW = pytest.mark.slow
# The processes a part starts: play's main process and its side's; the command, torchrun and its worker.
PROCESSES = {"play": 2, "zero3": 3}


@pytest.mark.parametrize(
    "part",
    [
        "preflight",
        pytest.param("play", marks=SLOW),
        pytest.param("offline-po", marks=SLOW),
        pytest.param("sft-kl", marks=SLOW),
        pytest.param("zero3", marks=SLOW),
        pytest.param("online", marks=SLOW),
    ],
)
def test_each_part_of_the_gpu_check_loads_none_of_the_heavy_packages(part, tmp_path, request):
    out, loaded = run_part(part, tmp_path, None if part == "preflight" else request.getfixturevalue("tiny"))
    assert len(loaded) >= PROCESSES.get(part, 1), loaded  # the children too
    assert {argv: names for argv, names in loaded.items() if names} == {}
    if part == "preflight":  # from the tree, without lm-eval: the suite is not checked, and says so once
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
    if part == "play":  # the shipped words, the engine's own decoding loop
        figures = json.loads(out.splitlines()[-1])
        assert figures["words"] == ["sushi", "panties", "protagonist"]
        assert figures["sides"]["batched"]["engine"]["path"] == "fast"


def test_a_planted_import_on_a_part_of_the_check_is_seen(tmp_path):
    """The test above bites: ``import polars`` planted in the preflight's module is reported."""
    _, loaded = run_part("preflight", tmp_path, plant="spag.pipeline.preflight:polars")
    assert list(loaded.values()) == [{"polars"}]
