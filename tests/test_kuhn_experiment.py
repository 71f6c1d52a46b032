"""scripts/kuhn_experiment.py end to end on a tiny random model: the registered design at toy size (one seed,
one epoch, two of its runs: the base model offline, imitation online), every file it promises, resume, and the
summary's statistics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from spag.testing import load_script as load_script_file
from spag.testing import make_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "kuhn_experiment.py"


def load_script():
    return load_script_file(SCRIPT)


def test_the_registered_designs_name_every_arm_start_and_seed():
    ke = load_script()
    old = ke.read_design(ROOT / "experiments" / "kuhn-exploitability.yaml")
    assert set(old["starts"]) == {"base", "uniform", "always_bet"} and set(old["arms"]) == {
        "offline",
        "online",
    }
    names = ke.run_names(old)
    assert len(names) == len(set(names)) == 3 * 2 * len(old["seeds"])
    assert names[:6] == [f"{s}-{a}-0" for s in old["starts"] for a in old["arms"]]  # seed by seed
    design = ke.read_design(ROOT / "experiments" / "kuhn-positive-control.yaml")
    assert (
        design["seeds"] == [0, 1, 2, 3, 4]
        and design["epochs"] >= 4
        and design["strategy"]["mass_threshold"] == 0.9
    )
    names = ke.run_names(design)
    assert names[:3] == ["all_moves-chips-0", "all_moves-winners-0", "all_moves-chips_slow-0"]
    assert names[-5:] == [f"all_moves-online-{seed}" for seed in range(5)]  # the budget's arm comes last
    # every run's params validate; each arm plays at least 96 hands an epoch, the start imitates every move
    for arm in design["arms"]:
        params = yaml.safe_load(ke.params_for(design, "all_moves", arm, 3))
        assert params["seed"] == 3 and params["imitate"]["moves"] == "all"
        assert params["teacher"]["strategies"] == {"uniform": True}
        hands = (
            params["online"]["words"] * params["online"]["games_per_word"]
            if params["spag"]["method"] == "online"
            else params["play"]["words"]
        )
        assert hands >= 96 and params["spag"]["epochs"]["1"]["previous"] == "imitation"
    assert yaml.safe_load(ke.params_for(design, "all_moves", "winners", 0))["reward"]["payoff"] == "wins"
    assert yaml.safe_load(ke.params_for(design, "all_moves", "chips", 0))["reward"]["payoff"] == "chips"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"seeds": 5}, "seeds: expected list, got 5"),
        ({"seeds": []}, "seeds: expected a list of seeds"),
        (
            {"arms": {"chips": {"spag.learning_rat": 1.0}}, "last_arms": []},
            "all_moves-chips: .*spag.learning_rat",
        ),
        ({"epoch": 3}, "epoch: not a key of a design"),
        ({"last_arms": ["nothing"]}, "last_arms: 'nothing' is not an arm"),
    ],
)
def test_a_design_that_cannot_run_is_refused_in_one_line(tmp_path, change, message, capsys):
    ke = load_script()
    design = yaml.safe_load((ROOT / "experiments" / "kuhn-positive-control.yaml").read_text())
    design.update(change)
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(design))
    assert ke.main(["run", "--design", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and __import__("re").search(message, err[0])
    assert not (tmp_path / "out").exists()
    (tmp_path / "empty.yaml").write_text("")
    assert ke.main(["run", "--design", str(tmp_path / "empty.yaml")]) == 2


def test_criteria_are_judged_as_registered():
    ke = load_script()
    criteria = {"improvement": -0.05, "call_gap_rise": 0.1, "floor": 1 / 3, "below_floor_seeds": 4}
    runs = [
        {"start": 0.34, "last": last, "gap_start": 0.0, "gap_last": gap}
        for last, gap in ((0.20, 0.3), (0.22, 0.4), (0.25, 0.2), (0.21, 0.5), (0.30, 0.15))
    ]
    verdict = ke.judge_criteria(runs, criteria, 5)
    # the changes' mean -0.104, sd 0.0404, its t interval [-0.154, -0.054]: below -0.05
    assert verdict["a"]["high"] == pytest.approx(-0.104 + 2.7764 * 0.040373 / 5**0.5, abs=1e-4)
    assert verdict["a"]["passed"] and verdict["b"]["passed"] and verdict["c"]["below_floor"] == 5
    assert verdict["learns"]
    runs[4]["last"] = 0.36  # one seed above the floor: (c) still holds with 4 of 5, (a) no longer
    verdict = ke.judge_criteria(runs, criteria, 5)
    assert verdict["c"]["passed"] and verdict["c"]["below_floor"] == 4 and not verdict["a"]["passed"]
    runs[4]["last"] = 0.30
    runs[4]["gap_last"] = 0.05  # one seed's K-over-J calling rises by less than 0.1
    assert not ke.judge_criteria(runs, criteria, 5)["b"]["passed"]
    assert not ke.judge_criteria(runs[:4], criteria, 5)["learns"]  # a seed missing: not complete
    probabilities = {
        f"{p} {c} {h}": 0.5
        for p, h in (("first", "opening"), ("first", "check,bet"), ("second", "check"), ("second", "bet"))
        for c in "JQK"
    }
    probabilities.update(
        {"second K bet": 1.0, "first K check,bet": 0.8, "second J bet": 0.2, "first J check,bet": 0.0}
    )
    assert ke.call_gap(probabilities) == pytest.approx(0.8)


def test_t_interval_matches_the_t_distribution():
    ke = load_script()
    entry = ke.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    # mean 3, sd sqrt(2.5), t(0.975, 4) = 2.7764
    half = 2.7764451 * math.sqrt(2.5) / math.sqrt(5)
    assert (
        entry["mean"] == 3.0
        and entry["low"] == pytest.approx(3 - half)
        and entry["high"] == pytest.approx(3 + half)
    )
    assert type(entry["high"]) is float  # the summary is written as JSON
    assert ke.t_interval([0.5])["low"] is None


def test_a_toy_experiment_runs_resumes_and_is_summarised(tmp_path, monkeypatch):
    ke = load_script()
    model = make_tiny_checkpoint(tmp_path / "tiny")
    monkeypatch.setenv(ke.MODEL_VARIABLE, str(model))
    design = ke.read_design(ROOT / "experiments" / "kuhn-positive-control.yaml")
    design.update(
        seeds=[0, 1],
        epochs=1,
        strategy={"samples": 3, "mass_threshold": 0.9},
        arms={k: design["arms"][k] for k in ("chips", "online")},
    )
    design["twin"]["matched"] = {"chips": 5.0}
    design["overrides"].update(
        {
            "teacher.words": 6,
            "play.words": 4,
            "imitate.batch_size": 2,
            "spag.batch_size": 2,
            "reward.sft_limit": 2,
            "imitate.sft_limit": 2,
        }
    )
    design["arms"]["online"].update(
        {"online.words": 2, "online.words_per_step": 1, "online.games_per_word": 2}
    )
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(design))
    out = tmp_path / "runs"
    chosen = ["--only", "all_moves-chips-0,all_moves-online-0"]  # both arms, one seed
    assert ke.main(["run", "--design", str(path), "--out", str(out), *chosen]) == 0
    for name in ("all_moves-chips-0", "all_moves-online-0"):
        metrics = out / "runs" / name / "metrics"
        rows = [
            json.loads(line)
            for line in (metrics / "epochs" / "1" / "strategy.jsonl").read_text().splitlines()
        ]
        # a random model puts almost no mass on the canonical replies: the played way is read too
        assert [r["way"] for r in rows].count("exact") == 12 and [r["way"] for r in rows].count(
            "played"
        ) == 12
        assert all(0 <= r["probability"] <= 1 for r in rows)
        for folder in (metrics / "start", metrics / "epochs" / "1"):
            figures = json.loads((folder / "exploitability.json").read_text())
            assert 0 <= figures["played"]["chips"]["exploitability"] <= 1.5
        assert not (out / "runs" / name / "data" / "epoch_1" / "model").exists()  # read, then deleted
    assert (out / "runs" / "all_moves-chips-0" / "data" / "epoch_1" / "rows.parquet").exists()
    assert (out / "runs" / "all_moves-online-0" / "data" / "epoch_1" / "online" / "episodes").is_dir()
    assert (out / "starts" / "all_moves" / "data" / "imitation" / "model").is_dir()
    # the imitation set holds every move of the teacher's hands, folds among them
    import pyarrow.parquet as pq

    imitation = pq.read_table(
        out / "starts" / "all_moves" / "data" / "imitation" / "rows.parquet"
    ).to_pylist()
    assert any(r["completion"] == "[fold]" for r in imitation)
    finished = json.loads((out / "runs" / "all_moves-chips-0" / "progress.json").read_text())["finished"]
    # a second run does nothing: every chosen run is finished
    assert ke.main(["run", "--design", str(path), "--out", str(out), *chosen]) == 0
    assert (
        json.loads((out / "runs" / "all_moves-chips-0" / "progress.json").read_text())["finished"] == finished
    )
    # the output folder moves with its runs: every link is relative
    moved = tmp_path / "moved"
    out.rename(moved)
    assert (moved / "runs" / "all_moves-chips-0" / "data" / "imitation" / "model").is_dir()
    result = ke.summarise(design, moved)
    cell = result["cells"]["all_moves/chips"]
    assert cell["ways"] == ["played"] and cell["test"]["n"] == 1 and cell["test"]["low"] is None
    run = cell["runs"][0]
    assert run["difference"] == pytest.approx(
        run["points"]["epoch_1"]["played"]["chips"]["exploitability"]
        - run["points"]["start"]["played"]["chips"]["exploitability"]
    )
    assert run["last"] == "epoch_1" and set(run["probabilities"]) == {"start", "epoch_1"}
    assert len(run["probabilities"]["start"]) == 12 and set(run["call_gap"]) == {"start", "epoch_1"}
    assert (
        cell["criteria"]["complete"] is False and cell["criteria"]["learns"] is False
    )  # one of the two seeds
    # the twin of every cell, on its runs' settings and both seeds, at the default and the matched rate
    twin = cell["twin"]
    assert set(twin) == {"default", "matched"} and twin["matched"]["learning_rate"] == 5.0
    assert [len(t["runs"]) for t in twin.values()] == [2, 2] and len(twin["default"]["curve"]) == 2
    assert twin["default"]["runs"][0]["points"][1]["hands"] == 4
    assert set(result["cells"]["all_moves/online"]["twin"]) == {"default"}
    # --card-blind: each rate's card-blind twin beside it, whose cards keep the start's differences in logit
    blind = ke.summarise(design, moved, card_blind=True)["cells"]["all_moves/chips"]["twin"]
    assert set(blind) == {"default", "matched", "default, card-blind", "matched, card-blind"}
    assert (
        blind["default"]["curve"] == twin["default"]["curve"] and blind["matched, card-blind"]["card_blind"]
    )

    def logit_gaps(probabilities):
        logit = {k: math.log(p / (1 - p)) for k, p in probabilities.items()}
        return [
            logit[f"{seat} K {history}"] - logit[f"{seat} J {history}"]
            for seat, history in (
                ("first", "opening"),
                ("first", "check,bet"),
                ("second", "check"),
                ("second", "bet"),
            )
        ]

    for seed in blind["default, card-blind"]["runs"]:
        first, last = seed["points"][0]["probabilities"], seed["points"][-1]["probabilities"]
        assert logit_gaps(last) == pytest.approx(logit_gaps(first), abs=1e-4)
        assert last != first  # it moved, alike for every card
    assert len(result["cfr"]["curve"]) == 1 and result["cfr"]["after"]["1000"] < 0.01
    assert result["equilibrium"]["chips"]["exploitability"] == pytest.approx(0, abs=1e-12)
    table = ke.markdown(result)
    assert "| all_moves/chips | 1 | played |" in table and "all_moves/chips: twin, rate 5 (matched)" in table
    # a summary is written only where nothing is, or (--overwrite) over a summary this script wrote
    target = tmp_path / "results.json"
    target.write_text("{}")
    assert ke.main(["summarise", "--design", str(path), "--out", str(moved), "-o", str(target)]) == 2
    assert (
        ke.main(["summarise", "--design", str(path), "--out", str(moved), "-o", str(target), "--overwrite"])
        == 2
    )
    assert target.read_text() == "{}"  # not this script's: kept
    fresh = tmp_path / "fresh.json"
    assert ke.main(["summarise", "--design", str(path), "--out", str(moved), "-o", str(fresh)]) == 0
    assert (
        ke.main(["summarise", "--design", str(path), "--out", str(moved), "-o", str(fresh), "--overwrite"])
        == 0
    )
    # --merge: an earlier summary's runs stand in for runs whose folders are gone; none under another design
    earlier = json.loads(fresh.read_text())
    merged = ke.summarise(design, tmp_path / "later", earlier=earlier)["cells"]["all_moves/chips"]
    assert merged["runs"] == earlier["cells"]["all_moves/chips"]["runs"] and merged["test"]["n"] == 1
    with pytest.raises(ke.DesignError, match="--merge: that summary was made under another design"):
        ke.summarise({**design, "seeds": [0]}, tmp_path / "later", earlier=earlier)
    # starts: each start's 12 exact probabilities, the ones the runs started from
    trained = ke.starts(design, moved)["all_moves"]
    assert len(trained["probabilities"]) == 12
    assert trained["probabilities"] == pytest.approx(twin["default"]["runs"][0]["points"][0]["probabilities"])
    assert trained["figures"]["chips"]["exploitability"] == pytest.approx(
        json.loads(
            (moved / "starts" / "all_moves" / "metrics" / "start" / "exploitability.json").read_text()
        )["exact"]["chips"]["exploitability"]
    )
    # a run or a summary under another design is refused: the runs were made under this one
    design["epochs"] = 2
    path.write_text(yaml.safe_dump(design))
    assert ke.main(["summarise", "--design", str(path), "--out", str(moved)]) == 2
    assert ke.main(["run", "--design", str(path), "--out", str(moved), *chosen]) == 2
    with pytest.raises(ke.DesignError, match="not a run of the design"):
        ke.run(design, tmp_path / "other", ["all_moves-chips-7"], False)


def test_a_kill_after_an_epoch_is_marked_resumes_without_its_deleted_checkpoint(tmp_path, monkeypatch):
    ke = load_script()
    layout = ke.Layout(tmp_path)
    for epoch in (1, 2):
        layout.model(f"epoch_{epoch}").mkdir(parents=True)
    ke._mark(tmp_path, "epoch_1")
    ke._mark(tmp_path, "epoch_2")
    # killed after marking epoch 2, before deleting epoch 1's checkpoint: the next pass deletes it
    ke._drop_model(layout, 1, keep=False)
    assert not layout.model("epoch_1").exists() and layout.model("epoch_2").exists()
    ke._drop_model(layout, 0, keep=False)  # the start (epoch 0) is never the script's to delete
