"""scripts/kuhn_experiment.py end to end on a tiny random model: the registered design at toy size (one seed,
one epoch, two of its runs: the base model offline, imitation online), every file it promises, resume, and the
summary's statistics."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from spag.testing import make_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "kuhn_experiment.py"


def load_script():
    spec = importlib.util.spec_from_file_location("kuhn_experiment", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["kuhn_experiment"] = module
    spec.loader.exec_module(module)
    return module


def test_the_registered_design_names_every_arm_start_and_seed():
    ke = load_script()
    design = ke.read_design(ROOT / "experiments" / "kuhn-exploitability.yaml")
    assert set(design["starts"]) == {"base", "uniform", "always_bet"} and set(design["arms"]) == {"offline", "online"}
    assert len(design["seeds"]) >= 5 and design["strategy"]["mass_threshold"] == 0.9
    names = ke.run_names(design)
    assert len(names) == len(set(names)) == 3 * 2 * len(design["seeds"])
    assert names[:6] == [f"{s}-{a}-0" for s in design["starts"] for a in design["arms"]]  # seed by seed
    # every run's params validate, and the arms play the same number of hands per epoch
    for start in design["starts"]:
        offline = yaml.safe_load(ke.params_for(design, start, "offline", 3))
        online = yaml.safe_load(ke.params_for(design, start, "online", 3))
        assert offline["seed"] == 3 and offline["reward"]["payoff"] == "chips"
        assert offline["play"]["words"] == online["online"]["words"] * online["online"]["games_per_word"]
        first = offline["spag"]["epochs"]["1"]["previous"]
        assert first == ("base" if start == "base" else "imitation")


def test_t_interval_matches_the_t_distribution():
    ke = load_script()
    entry = ke.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    # mean 3, sd sqrt(2.5), t(0.975, 4) = 2.7764
    half = 2.7764451 * math.sqrt(2.5) / math.sqrt(5)
    assert entry["mean"] == 3.0 and entry["low"] == pytest.approx(3 - half) and entry["high"] == pytest.approx(3 + half)
    assert type(entry["high"]) is float  # the summary is written as JSON
    assert ke.t_interval([0.5])["low"] is None


def test_a_toy_experiment_runs_resumes_and_is_summarised(tmp_path, monkeypatch):
    ke = load_script()
    model = make_tiny_checkpoint(tmp_path / "tiny")
    monkeypatch.setenv(ke.MODEL_VARIABLE, str(model))
    design = ke.read_design(ROOT / "experiments" / "kuhn-exploitability.yaml")
    design.update(seeds=[0], epochs=1, starts={k: design["starts"][k] for k in ("base", "uniform")},
                  strategy={"samples": 3, "mass_threshold": 0.9})
    design["overrides"].update({"teacher.words": 6, "play.words": 4, "imitate.batch_size": 2, "spag.batch_size": 2,
                                "reward.sft_limit": 2, "imitate.sft_limit": 2})
    design["arms"]["online"].update({"online.words": 2, "online.words_per_step": 1, "online.games_per_word": 2})
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(design))
    out = tmp_path / "runs"
    chosen = ["--only", "base-offline-0,uniform-online-0"]  # both starts' ways in, both arms; half the runs
    assert ke.main(["run", "--design", str(path), "--out", str(out), *chosen]) == 0
    for name in ("base-offline-0", "uniform-online-0"):
        metrics = out / "runs" / name / "metrics"
        rows = [json.loads(line) for line in (metrics / "epochs" / "1" / "strategy.jsonl").read_text().splitlines()]
        # a random model puts almost no mass on the canonical replies: the played way is read too
        assert [r["way"] for r in rows].count("exact") == 12 and [r["way"] for r in rows].count("played") == 12
        assert all(0 <= r["probability"] <= 1 for r in rows)
        for folder in (metrics / "start", metrics / "epochs" / "1"):
            figures = json.loads((folder / "exploitability.json").read_text())
            assert 0 <= figures["played"]["chips"]["exploitability"] <= 1.5
        assert not (out / "runs" / name / "data" / "epoch_1" / "model").exists()  # read, then deleted
    assert (out / "runs" / "base-offline-0" / "data" / "epoch_1" / "rows.parquet").exists()
    assert (out / "runs" / "uniform-online-0" / "data" / "epoch_1" / "online" / "episodes").is_dir()
    assert (out / "starts" / "uniform" / "data" / "imitation" / "model").is_dir()
    finished = json.loads((out / "runs" / "base-offline-0" / "progress.json").read_text())["finished"]
    # a second run does nothing: every run is finished
    assert ke.main(["run", "--design", str(path), "--out", str(out), *chosen]) == 0
    assert json.loads((out / "runs" / "base-offline-0" / "progress.json").read_text())["finished"] == finished
    result = ke.summarise(design, out)
    cell = result["cells"]["base/offline"]
    assert cell["ways"] == ["played"] and cell["test"]["n"] == 1 and cell["test"]["low"] is None
    run = cell["runs"][0]
    assert run["difference"] == pytest.approx(run["points"]["epoch_1"]["played"]["chips"]["exploitability"]
                                              - run["points"]["start"]["played"]["chips"]["exploitability"])
    assert cell["secondary"]["moved"]["mean"] == pytest.approx(run["moved"])
    assert set(cell["secondary"]["probabilities"]["last"]) == set(run["probabilities"]["start"])
    assert len(run["probabilities"]["start"]) == 12
    assert result["equilibrium"]["chips"]["exploitability"] == pytest.approx(0, abs=1e-12)
    assert "| base/offline | 1 | played |" in ke.markdown(result)
    with pytest.raises(SystemExit, match="not a run of the design"):
        ke.main(["run", "--design", str(path), "--out", str(out), "--only", "base-offline-7"])
