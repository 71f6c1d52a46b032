"""`dvc repro` of the whole SPAG loop on a tiny random model, in a temporary copy of the project."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spag.testing import make_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent


def run(cmd, cwd, env=None):
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return result


def small_params(tiny_model: Path) -> dict:
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["model"]["base"] = str(tiny_model)
    p["words"]["top"] = 300
    p["game"]["max_turns"] = 1
    p["teacher"].update(words=6, max_new_tokens=6)
    p["play"].update(words=4, max_new_tokens=6, batch_size=8)
    p["reward"]["sft_limit"] = 4
    p["imitate"]["sft_limit"] = 4
    for stage in ("imitate", "spag"):
        p[stage].update(batch_size=2, max_length=256)
    p["evaluate"].update(words=3, seeds=2, max_new_tokens=6)
    p["reward"]["foul_penalty"] = 1.0
    p["evaluate"]["benchmark"]["limit"] = 4
    return p


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    work = tmp_path_factory.mktemp("project")
    for name in ("dvc.yaml", "stages"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    tiny = make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")
    (work / "params.yaml").write_text(yaml.safe_dump(small_params(tiny)))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    run(["git", "init", "-q"], work, env)
    run(["dvc", "init", "-q"], work, env)
    shutil.copytree(ROOT / ".dvc" / "plots", work / ".dvc" / "plots")
    run(["git", "add", "-A"], work, env)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project"], work, env)
    result = run(["dvc", "repro"], work, env)
    return work, result, env


def test_repro_runs_every_stage_and_records_metrics(pipeline):
    from spag.game.episodes import read_episodes
    from spag.game.rules import OUTCOMES
    from spag.outputs import output_kind
    from spag.train.trainer import read_summary

    work, result, _ = pipeline
    p = yaml.safe_load((work / "params.yaml").read_text())
    assert json.loads((work / "data/base_model/config.json").read_text())["model_type"] == "llama"
    for name in ("imitation", "epoch_1", "epoch_2"):
        model = work / "data" / name / "model"
        summary = read_summary(model)  # written last: the model is finished
        assert summary["steps"] >= 1 and summary["rows"] >= 1, name
        assert output_kind(model) == "train"
    for epoch in (1, 2):
        episodes = read_episodes(work / f"data/epoch_{epoch}/episodes")
        assert len(episodes) == p["play"]["words"]
        assert all(e["outcome"] in OUTCOMES for e in episodes)
    games = json.loads((work / "metrics/epochs/2/games.json").read_text())
    # 3 held-out words x 2 roles x 2 sampling seeds, against the imitation model only (vs_previous is off)
    assert set(games) == {"vs_imitation"}
    assert games["vs_imitation"]["games"] == 12 and games["vs_imitation"]["seeds"] == 2
    assert sorted(p.name for p in (work / "data/epoch_2/eval_episodes/vs_imitation").iterdir()) == ["seed_0",
                                                                                                   "seed_1"]
    report = json.loads((work / "metrics/report.json").read_text())
    assert sorted(report["epochs"]) == ["1", "2"] and report["final"]["epoch"] == 2
    for epoch in ("1", "2"):
        score = report["epochs"][epoch]["score_vs_imitation"]
        assert score["games"] == 12 and 0 <= score["low"] <= score["value"] <= score["high"] <= 1
        selfplay = report["epochs"][epoch]["selfplay"]
        assert selfplay["games"] == 4 and 0 <= selfplay["decisive_rate"] <= 1
    assert report["final"]["score_vs_imitation"] == report["epochs"]["2"]["score_vs_imitation"]
    assert "final score vs imitation" in result.stdout + result.stderr


def test_repro_again_is_up_to_date_and_metrics_are_visible_to_dvc(pipeline):
    work, _, env = pipeline
    status = run(["dvc", "status"], work, env)
    assert "up to date" in status.stdout
    shown = run(["dvc", "metrics", "show", "--json"], work, env)
    assert "games.json" in shown.stdout


def test_plots_have_one_series_per_role_and_render(pipeline):
    import csv

    work, _, env = pipeline
    with open(work / "metrics/plots/vs_imitation.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["epoch"], r["series"]) for r in rows} == {
        (e, s) for e in ("1", "2") for s in ("score", "attacker win", "defender win", "attacker foul")}
    assert all(float(r["low"]) <= float(r["value"]) <= float(r["high"]) for r in rows)
    with open(work / "metrics/plots/selfplay_rates.csv", newline="") as f:
        assert {"decisive", "foul", "attacker win", "defender win"} <= {r["series"] for r in csv.DictReader(f)}
    png = (work / "metrics/learning_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    run(["dvc", "plots", "show", "-o", "plots_html"], work, env)
    html = (work / "plots_html/index.html").read_text()
    assert "attacker win" in html and "errorband" in html


def test_analyze_reads_the_pipeline_episodes(pipeline):
    work, _, env = pipeline
    out = run([sys.executable, "-m", "spag.cli", "analyze", "data/**/episodes/*.parquet", "--query", "win_rate",
               "--format", "json"], work, env)
    rows = json.loads(out.stdout)
    from spag.io import read_records

    played = sum(len(read_records(f)) for f in work.glob("data/**/episodes/*.parquet"))
    assert played > 0
    for role in ("attacker", "defender"):
        mine = [r for r in rows if r["role"] == role]
        assert sum(r["games"] for r in mine) == played  # every game counted once per role
        assert all(r["win_rate"] == pytest.approx(r["wins"] / r["games"]) for r in mine)


@pytest.mark.parametrize("key, value", [("deepspeed", "configs/deepspeed_zero3.json"),
                                        ("launcher", "accelerate launch --num_processes 2")])
def test_changing_how_training_runs_makes_train_stale(pipeline, key, value):
    work, _, env = pipeline
    params_file = work / "params.yaml"
    original = params_file.read_text()
    p = yaml.safe_load(original)
    p["spag"][key] = value
    try:
        params_file.write_text(yaml.safe_dump(p))
        status = run(["dvc", "status", "--json"], work, env)
    finally:
        params_file.write_text(original)
    stale = set(json.loads(status.stdout))
    assert {"train@1", "train@2"} <= stale
    assert not {"play@1", "reward@1", "imitate"} & stale
