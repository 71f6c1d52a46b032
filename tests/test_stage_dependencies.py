"""A code edit re-runs only the stages whose work it touches: DVC's own graph of the project's dvc.yaml (its
stages, their deps, foreach expanded) and, for an edited file, the stages that list it and every stage after
them. The harness (params, preflight, process tuning, dvc.yaml's writer) and the backends the params do not
choose are nobody's dependency."""

from __future__ import annotations

import shutil
from pathlib import Path

import networkx as nx
import pytest
import yaml
from dvc.repo import Repo

from spag.config import load_settings
from spag.pipeline.dvcyaml import missing_dependencies, project_settings, render, stage_files
from spag.pipeline.table import STAGES

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK_STAGES = {"benchmark_data", "evaluate_base", "evaluate_imitation", "evaluate"}
TRAINING_STAGES = {
    "base_model",
    "words",
    "teacher_play",
    "imitation_data",
    "imitate",
    "play",
    "reward",
    "train",
}


@pytest.fixture(scope="module")
def pipeline() -> tuple[nx.DiGraph, dict[str, list[str]]]:
    """DVC's graph of the project's stages (by name) and each stage's deps, from one reading of dvc.yaml."""
    with Repo(str(ROOT)) as repo:
        index = repo.index
        graph = nx.relabel_nodes(index.graph, lambda stage: stage.addressing)
        return graph, {stage.addressing: [str(d.def_path) for d in stage.deps] for stage in index.stages}


@pytest.fixture(scope="module")
def graph(pipeline) -> nx.DiGraph:
    return pipeline[0]


@pytest.fixture(scope="module")
def deps(pipeline) -> dict[str, list[str]]:
    return pipeline[1]


def rerun(edited: str, graph: nx.DiGraph, deps: dict[str, list[str]]) -> set[str]:
    """The stages DVC re-runs after ``edited`` changes: those that list it (or a folder holding it), and every
    stage downstream of them (an edge points from a stage to a stage it depends on)."""
    direct = {
        name
        for name, paths in deps.items()
        if any(edited == p or edited.startswith(p.rstrip("/") + "/") for p in paths)
    }
    return direct.union(*(nx.ancestors(graph, name) for name in direct))


def kinds(names: set[str]) -> set[str]:
    return {name.split("@")[0] for name in names}


# (edited file, stages that must re-run, kinds of stage that must not)
EDITS = [
    (
        "spag/evaluate/benchmark.py",
        {"benchmark_data", "evaluate_base", "evaluate_imitation", "report"},
        TRAINING_STAGES,
    ),
    (
        "spag/game/taboo/templates.yaml",
        {"teacher_play", "play@1", "reward@1"},
        {"base_model", "words", "benchmark_data"},
    ),
    (
        "spag/rewards/build.py",
        {"imitation_data", "reward@1"},
        {"base_model", "words", "benchmark_data", "teacher_play"},
    ),
    ("spag/game/words.py", {"words"}, {"base_model"}),
]
# Edits that re-run no stage of the default run: the harness, the memory plan, a backend it does not use.
INERT = [
    "spag/models/memory.py",
    "spag/players/openai.py",
    "spag/pipeline/preflight.py",
    "spag/pipeline/run.py",
    "spag/pipeline/dvcyaml.py",
    "spag/harness/allocator.py",
    "spag/cli.py",
    "spag/commands/train.py",
    "spag/harness/rule.py",
    "spag/harness/folders.py",
    "spag/harness/manifest.py",
    "spag/harness/locks.py",
    "spag/harness/partial.py",
    "spag/harness/plays.py",
    "spag/harness/training.py",
    "spag/harness/tracking.py",
    "spag/harness/process.py",
    "spag/harness/zero.py",
    "spag/harness/environment.py",
]


@pytest.mark.parametrize("edited, must, must_not", EDITS, ids=[e[0] for e in EDITS])
def test_an_edit_reruns_the_stages_it_touches_and_no_others(edited, must, must_not, graph, deps):
    assert (ROOT / edited).exists()
    again = rerun(edited, graph, deps)
    assert must <= again, f"{edited}: {sorted(must - again)} would not re-run"
    assert not kinds(again) & must_not, f"{edited} re-runs {sorted(kinds(again) & must_not)}"
    if edited == "spag/evaluate/benchmark.py":  # only the benchmark stages and those after them
        after = set().union(
            *(nx.ancestors(graph, name) for name in graph if kinds({name}) <= BENCHMARK_STAGES)
        )
        assert again <= {n for n in graph if kinds({n}) <= BENCHMARK_STAGES} | after


@pytest.mark.parametrize("edited", INERT)
def test_an_edit_of_the_harness_or_an_unused_backend_reruns_nothing(edited, graph, deps):
    assert (ROOT / edited).exists()
    assert rerun(edited, graph, deps) == set()


def test_a_stage_that_plays_depends_on_the_backend_its_params_choose():
    settings = project_settings()
    teacher = settings.model_copy(
        update={"teacher": settings.teacher.model_copy(update={"backend": "openai"})}
    )
    written = yaml.safe_load(render(teacher))["stages"]
    with_openai = {
        name for name, entry in written.items() if "spag/players/openai.py" in entry.get("do", entry)["deps"]
    }
    assert with_openai == {"teacher_play"}
    # dvc.yaml written for hf: a stage started on vllm is told to rewrite it, naming the backend's file
    play = settings.model_copy(update={"play": settings.play.model_copy(update={"backend": "vllm"})})
    assert missing_dependencies(ROOT, "play", play) == ["spag/players/vllm.py"]
    assert missing_dependencies(ROOT, "play", settings) == []
    assert missing_dependencies(ROOT / "tests", "play", play) == []  # no dvc.yaml there: outside DVC


def test_a_stage_depends_on_fewer_files_than_the_code_base():
    settings = project_settings()
    counts = {stage.name: len(stage_files(stage, settings)) for stage in STAGES}
    every = len(list((ROOT / "spag").rglob("*.py")))
    assert counts["words"] <= 25 and counts["base_model"] <= 25 and counts["benchmark_data"] <= 35, counts
    assert max(counts.values()) < every * 0.7, (counts, every)


def test_config_show_into_params_yaml_rewrites_spags_dvc_yaml_for_its_backends(tmp_path):
    """The documented way to use a preset, `spag config show ... -o params.yaml && dvc repro`, keeps dvc.yaml
    current: the GPU presets' teacher plays on the openai backend, so teacher_play depends on it there."""
    from spag.testing import run_cli

    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    done = run_cli(
        "config",
        "show",
        ROOT / "configs" / "paper.yaml",
        "--override",
        ROOT / "configs" / "paper-toy.yaml",
        "-o",
        tmp_path / "params.yaml",
    )
    assert done.code == 0, done.stderr
    assert "dvc.yaml rewritten for its backends" in done.stderr + done.stdout
    written = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]
    assert "spag/players/openai.py" in written["teacher_play"]["deps"]
    assert missing_dependencies(tmp_path, "teacher_play", load_settings(tmp_path / "params.yaml")) == []
    # a dvc.yaml spag did not write is left alone
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "dvc.yaml").write_text("stages: {}\n")
    done = run_cli("config", "show", ROOT / "configs" / "paper.yaml", "-o", tmp_path / "mine" / "params.yaml")
    assert done.code == 0 and (tmp_path / "mine" / "dvc.yaml").read_text() == "stages: {}\n"
