"""The report stage's library: report.json per epoch, the long-format plot CSVs and the PNG."""

import csv
import json

import pytest

from spag.evaluate.games import word_bootstrap
from spag.game.rules import ATTACKER_BREAKS_RULES, ATTACKER_WINS, DEFENDER_WINS, TIE
from spag.report import write_report
from spag.testing import episode_ending


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


WORDS = ("apple", "river", "mountain", "coffee", "window", "garden")
CAUSE = {ATTACKER_WINS: "wrong_guess", DEFENDER_WINS: "correct_guess", TIE: "out_of_turns",
         ATTACKER_BREAKS_RULES: "attacker_said_word"}


def fake_epoch(metrics, epoch, attacker_outcomes):
    as_attacker = [episode_ending(WORDS[i], CAUSE[o]) for i, o in enumerate(attacker_outcomes)]
    as_defender = [episode_ending(WORDS[i], "correct_guess") for i in range(len(attacker_outcomes))]
    write(metrics / "epochs" / str(epoch) / "games.json",
          {"vs_imitation": {"bootstrap": word_bootstrap(as_attacker, as_defender, n_resamples=500)}})
    selfplay = {"run": f"epoch_{epoch}", "epoch": epoch, "games": 64, "mean_turns": 3.5, "mean_reply_tokens": 20.0,
                "truncated_share": 0.25}
    for key in ("decisive_rate", "foul_rate", "attacker_win_rate", "defender_win_rate"):
        selfplay.update({key: 0.1 * epoch, f"{key}_low": 0.05 * epoch, f"{key}_high": 0.15 * epoch})
    write(metrics / "epochs" / str(epoch) / "selfplay.json", selfplay)
    write(metrics / "epochs" / str(epoch) / "benchmark.json",
          {"geometric_mean": 0.3, "tasks": {"t1": {"score": 0.2}, "t2": {"score": 0.45}}})


def test_report_per_epoch_with_intervals_csvs_and_png(tmp_path):
    metrics = tmp_path / "metrics"
    fake_epoch(metrics, 1, [ATTACKER_BREAKS_RULES, ATTACKER_BREAKS_RULES, TIE, ATTACKER_WINS])
    fake_epoch(metrics, 2, [ATTACKER_WINS, ATTACKER_WINS, TIE, ATTACKER_BREAKS_RULES])
    write(metrics / "imitation" / "benchmark.json", {"geometric_mean": 0.28, "tasks": {"t1": {"score": 0.25}}})

    report = write_report(metrics, [1, 2])
    assert json.loads((metrics / "report.json").read_text()) == report
    # epoch 2: attacker points 1, 1, 1/2, 0; as defender the model wins every game -> 6.5 / 8
    score = report["epochs"]["2"]["score_vs_imitation"]
    assert score["value"] == pytest.approx(6.5 / 8) and score["games"] == 8
    assert report["final"]["epoch"] == 2 and report["final"]["score_vs_imitation"] == score
    assert report["epochs"]["1"]["foul_rate"]["attacker"]["value"] == pytest.approx(0.5)
    assert report["epochs"]["2"]["win_rate"]["attacker"]["value"] == pytest.approx(0.5)
    assert report["epochs"]["2"]["selfplay"]["decisive_rate"] == pytest.approx(0.2)
    assert report["imitation_benchmark"]["geometric_mean"] == 0.28
    # the headline: a few flat numbers per epoch, the interval and the games behind it included
    summary = json.loads((metrics / "summary.json").read_text())
    outcomes = summary["2"].pop("outcomes")
    assert summary["2"] == {"score": score["value"], "score_low": score["low"], "score_high": score["high"],
                            "games": 8, "attacker_foul": pytest.approx(0.25), "selfplay_decisive": pytest.approx(0.2),
                            "selfplay_foul": pytest.approx(0.2), "benchmark": 0.3}
    # how the games ended, per role, each with its interval: one attacker foul in four games at epoch 2
    assert sum(point["value"] for point in outcomes["attacker"].values() if point is not None) == pytest.approx(1.0)
    assert all(point["low"] <= point["value"] <= point["high"] for point in outcomes["attacker"].values())
    assert summary["1"]["attacker_foul"] == pytest.approx(0.5) and set(summary) == {"1", "2"}

    with open(metrics / "plots" / "vs_imitation.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["epoch"], r["series"]) for r in rows] == [
        (e, s) for e in ("1", "2") for s in ("score", "attacker win", "defender win", "attacker foul")]
    with open(metrics / "plots" / "benchmark.csv", newline="") as f:
        bench = list(csv.DictReader(f))
    assert ("0", "t1", "0.25") in {(r["epoch"], r["series"], r["value"]) for r in bench}
    with open(metrics / "plots" / "selfplay_rates.csv", newline="") as f:
        rates = {(r["epoch"], r["series"]): r for r in csv.DictReader(f)}
    assert float(rates[("2", "foul")]["low"]) == pytest.approx(0.1)
    assert rates[("1", "truncated replies")]["value"] == "0.25"
    assert (metrics / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_report_without_evaluation_says_nothing_it_did_not_measure(tmp_path):
    report = write_report(tmp_path, [1])
    assert report["epochs"] == {"1": {}} and "score_vs_imitation" not in report["final"]
