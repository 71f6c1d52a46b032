"""The report stage's library: report.json per epoch, the long-format plot CSVs and the PNG."""

import csv
import json
from pathlib import Path

import pytest

from spag.evaluate.games import word_bootstrap
from spag.game.taboo import Taboo
from spag.game.taboo.outcomes import ATTACKER_BREAKS_RULES, ATTACKER_WINS, DEFENDER_WINS, TIE
from spag.pipeline.report import write_report
from spag.testing import episode_ending

TABOO = Taboo()


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


WORDS = ("apple", "river", "mountain", "coffee", "window", "garden")
CAUSE = {
    ATTACKER_WINS: "wrong_guess",
    DEFENDER_WINS: "correct_guess",
    TIE: "out_of_turns",
    ATTACKER_BREAKS_RULES: "attacker_said_word",
}


def fake_epoch(metrics, epoch, attacker_outcomes):
    as_attacker = [episode_ending(WORDS[i], CAUSE[o]) for i, o in enumerate(attacker_outcomes)]
    as_defender = [episode_ending(WORDS[i], "correct_guess") for i in range(len(attacker_outcomes))]
    write(
        metrics / "epochs" / str(epoch) / "games.json",
        {"vs_imitation": {"bootstrap": word_bootstrap(TABOO, as_attacker, as_defender, n_resamples=500)}},
    )
    selfplay = {
        "run": f"epoch_{epoch}",
        "epoch": epoch,
        "games": 64,
        "mean_turns": 3.5,
        "mean_reply_tokens": 20.0,
        "truncated_share": 0.25,
    }
    for key in ("decisive_rate", "foul_rate", "attacker_win_rate", "defender_win_rate"):
        selfplay.update({key: 0.1 * epoch, f"{key}_low": 0.05 * epoch, f"{key}_high": 0.15 * epoch})
    selfplay["collapse"] = {
        "shares": {"attacker_distinct_openings": 1 / epoch, "defender_empty": None},
        "lengths": {"attacker_words_per_reply": 12.0 / epoch},
        "counts": {"attacker_replies": 128},
    }
    write(metrics / "epochs" / str(epoch) / "selfplay.json", selfplay)
    write(
        metrics / "epochs" / str(epoch) / "benchmark.json",
        {"geometric_mean": 0.3, "tasks": {"t1": {"score": 0.2}, "t2": {"score": 0.45}}},
    )


def test_report_per_epoch_with_intervals_csvs_and_png(tmp_path):
    metrics = tmp_path / "metrics"
    fake_epoch(metrics, 1, [ATTACKER_BREAKS_RULES, ATTACKER_BREAKS_RULES, TIE, ATTACKER_WINS])
    fake_epoch(metrics, 2, [ATTACKER_WINS, ATTACKER_WINS, TIE, ATTACKER_BREAKS_RULES])
    write(
        metrics / "imitation" / "benchmark.json", {"geometric_mean": 0.28, "tasks": {"t1": {"score": 0.25}}}
    )

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
    # the headline (dvc metrics show): the score with its interval and games, a terminal's width
    headline = json.loads((metrics / "summary.json").read_text())
    assert headline == {
        e: {
            "score": report["epochs"][e]["score_vs_imitation"]["value"],
            "score_low": report["epochs"][e]["score_vs_imitation"]["low"],
            "score_high": report["epochs"][e]["score_vs_imitation"]["high"],
            "games": report["epochs"][e]["score_vs_imitation"]["games"],
        }
        for e in ("1", "2")
    }
    # the details: a few flat numbers per epoch, the interval and the games behind it included
    summary = json.loads((metrics / "details.json").read_text())
    outcomes = summary["2"].pop("outcomes")
    assert summary["2"] == {
        "score": score["value"],
        "score_low": score["low"],
        "score_high": score["high"],
        "games": 8,
        "attacker_foul": pytest.approx(0.25),
        "selfplay_decisive": pytest.approx(0.2),
        "selfplay_foul": pytest.approx(0.2),
        "benchmark": 0.3,
        "selfplay_collapse": {
            "shares": {"attacker_distinct_openings": 0.5, "defender_empty": None},
            "lengths": {"attacker_words_per_reply": 6.0},
        },
    }
    assert report["epochs"]["2"]["selfplay"]["collapse"]["counts"] == {"attacker_replies": 128}
    # how the games ended, per role, each with its interval: one attacker foul in four games at epoch 2
    assert sum(
        point["value"] for point in outcomes["attacker"].values() if point is not None
    ) == pytest.approx(1.0)
    assert all(point["low"] <= point["value"] <= point["high"] for point in outcomes["attacker"].values())
    assert summary["1"]["attacker_foul"] == pytest.approx(0.5) and set(summary) == {"1", "2"}

    with open(metrics / "plots" / "vs_imitation.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["epoch"], r["series"]) for r in rows] == [
        (e, s) for e in ("1", "2") for s in ("score", "attacker win", "defender win", "attacker foul")
    ]
    with open(metrics / "plots" / "benchmark.csv", newline="") as f:
        bench = list(csv.DictReader(f))
    assert ("0", "t1", "0.25") in {(r["epoch"], r["series"], r["value"]) for r in bench}
    with open(metrics / "plots" / "selfplay_rates.csv", newline="") as f:
        rates = {(r["epoch"], r["series"]): r for r in csv.DictReader(f)}
    assert float(rates[("2", "foul")]["low"]) == pytest.approx(0.1)
    assert rates[("1", "truncated replies")]["value"] == "0.25"
    # the collapse figures: a curve per figure measured (shares here), the lengths beside the others
    with open(metrics / "plots" / "selfplay_collapse.csv", newline="") as f:
        assert [(r["epoch"], r["series"], float(r["value"])) for r in csv.DictReader(f)] == [
            ("1", "attacker distinct openings", 1.0),
            ("2", "attacker distinct openings", 0.5),
        ]
    with open(metrics / "plots" / "selfplay_lengths.csv", newline="") as f:
        lengths = {(r["epoch"], r["series"]): float(r["value"]) for r in csv.DictReader(f)}
    assert lengths[("2", "attacker words per reply")] == 6.0 and lengths[("2", "tokens per reply")] == 20.0
    assert (metrics / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_report_draws_kuhn_pokers_action_entropy_per_information_set(tmp_path):
    """A game's collapse figures reach the report whatever they are: Kuhn poker's entropy in bits, an
    information set no hand reached left out of the curves."""
    selfplay = {
        "games": 60,
        "decisive_rate": 0.9,
        "foul_rate": 0.1,
        "collapse": {
            "entropy_bits": {"first_J_opening": 0.0, "first_K_check_bet": None},
            "counts": {"first_J_opening": 20, "first_K_check_bet": 0},
        },
    }
    for key in ("decisive_rate", "foul_rate"):
        selfplay.update({f"{key}_low": 0.0, f"{key}_high": 1.0})
    write(tmp_path / "epochs" / "1" / "selfplay.json", selfplay)
    write_report(tmp_path, [1])
    summary = json.loads((tmp_path / "details.json").read_text())["1"]
    assert summary["selfplay_collapse"] == {
        "entropy_bits": {"first_J_opening": 0.0, "first_K_check_bet": None}
    }
    with open(tmp_path / "plots" / "selfplay_collapse.csv", newline="") as f:
        assert [(r["series"], r["value"]) for r in csv.DictReader(f)] == [("first J opening", "0.0")]


def fake_strategy(folder, profile, mass, broken):
    """A checkpoint's strategy files as the evaluation stages write them (spag.evaluate.strategy), from a
    profile's exact figures: the same profile both ways."""
    from spag.evaluate.strategy import exploitability_report, write_strategy
    from spag.game.kuhn.exploitability import INFOSETS, all_figures

    rows = [
        {
            "way": way,
            "card": i.card,
            "history": i.history,
            "probability": profile[(i.card, i.history)],
            **({"mass": mass} if way == "exact" else {"replies": 4, "broken_share": broken}),
        }
        for way in ("exact", "played")
        for i in INFOSETS
    ]
    folder.mkdir(parents=True, exist_ok=True)
    write_strategy(
        folder,
        rows,
        exploitability_report(rows, {w: all_figures(profile) for w in ("exact", "played")}),
    )


def test_report_draws_kuhn_pokers_exploitability_per_checkpoint(tmp_path):
    """Base, imitation and every epoch in order (steps -1, 0, N), each way's chips exploitability with its
    mass: in report.json, the epochs' summary and a plot; another game's note is no point."""
    from spag.game.kuhn.exploitability import constant, equilibrium

    fake_strategy(tmp_path / "base", constant(0.5), 0.01, 0.5)  # uniform: 11/24 chip
    fake_strategy(tmp_path / "imitation", equilibrium(), 0.9, 0.0)  # 0
    fake_strategy(tmp_path / "epochs" / "1", constant(1.0), 0.8, 0.25)  # always bet and call: 1/3
    write(tmp_path / "epochs" / "2" / "exploitability.json", {"strategy": "off", "game": "taboo"})
    report = write_report(tmp_path, [1, 2])
    curve = [
        (
            p["checkpoint"],
            p["step"],
            round(p["exact"], 6),
            round(p["played"], 6),
            round(p["exact_mass_mean"], 6),
        )
        for p in report["exploitability"]
    ]
    assert curve == [
        ("base", -1, round(11 / 24, 6), round(11 / 24, 6), 0.01),
        ("imitation", 0, 0.0, 0.0, 0.9),
        ("epoch_1", 1, round(1 / 3, 6), round(1 / 3, 6), 0.8),
    ]
    assert report["exploitability"][-1]["played_broken_share"] == 0.25
    assert json.loads((tmp_path / "summary.json").read_text())["1"] == {
        "exploitability": pytest.approx(1 / 3)
    }
    summary = json.loads((tmp_path / "details.json").read_text())
    assert summary["1"]["exploitability"] == {
        "exact": pytest.approx(1 / 3),
        "played": pytest.approx(1 / 3),
        "exact_mass": pytest.approx(0.8),
    }
    assert "exploitability" not in summary["2"] and "exploitability" not in report["final"]
    with open(tmp_path / "plots" / "exploitability.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["epoch"], r["series"]) for r in rows} == {
        (e, s)
        for e in ("-1", "0", "1")
        for s in ("exact (chips)", "played (chips)", "exact: mass on the canonical replies")
    }
    assert (tmp_path / "learning_curves.png").read_bytes().startswith(b"\x89PNG")


def test_kuhn_pokers_report_draws_the_twin_and_cfr_beside_the_model(tmp_path):
    """With game.name kuhn-poker the report stage runs the tabular twin of the run's own loop from the
    imitation model's exact strategy (five seeds: a mean with its band) and CFR from uniform, an iteration an
    epoch; both reach report.json, the exploitability plot and the PNG, on the report's steps."""
    from spag.config import load_settings
    from spag.game.kuhn.exploitability import constant
    from spag.pipeline.stages.report import CFR, TWIN, exploitability_references

    root = Path(__file__).resolve().parent.parent
    settings = load_settings(root / "params.yaml", [root / "configs" / "kuhn-poker.yaml"])
    fake_strategy(tmp_path / "base", constant(0.5), 0.01, 0.5)
    fake_strategy(tmp_path / "imitation", constant(0.5), 0.95, 0.0)
    for epoch in ("1", "2"):
        fake_strategy(tmp_path / "epochs" / epoch, constant(0.6), 0.95, 0.0)
    references = exploitability_references(settings, tmp_path)
    assert [p["step"] for p in references[TWIN]] == [0, 1, 2] == [p["step"] for p in references[CFR]]
    assert references[TWIN][0]["value"] == pytest.approx(11 / 24) == references[CFR][0]["value"]
    twin = references[TWIN][-1]
    assert twin["low"] < twin["value"] < twin["high"] < 11 / 24  # five seeds of the preset's loop learn
    assert references[CFR][-1]["value"] < references[CFR][0]["value"]
    report = write_report(tmp_path, [1, 2], references)
    assert report["exploitability_references"] == references
    with open(tmp_path / "plots" / "exploitability.csv", newline="") as f:
        series = {r["series"] for r in csv.DictReader(f)}
    assert {TWIN, CFR, "exact (chips)"} <= series
    assert (
        exploitability_references(load_settings(root / "params.yaml"), tmp_path) is None
    )  # Adversarial Taboo


def test_report_without_evaluation_says_nothing_it_did_not_measure(tmp_path):
    report = write_report(tmp_path, [1])
    assert report["epochs"] == {"1": {}} and "score_vs_imitation" not in report["final"]
    assert "exploitability" not in report  # no strategy: an empty plot, no panel
    assert (tmp_path / "plots" / "exploitability.csv").read_text().strip() == "epoch,series,value,low,high"


def fake_benchmark(folder, correct):
    """A benchmark output with its per-item results, as the benchmark stages write them."""
    samples = [
        {"benchmark": task, "task": task, "doc_id": i, "correct": float(c)}
        for task, values in correct.items()
        for i, c in enumerate(values)
    ]
    (folder).mkdir(parents=True, exist_ok=True)
    (folder / "benchmark.samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    tasks = {
        task: {
            "label": task,
            "score": float(sum(v) / len(v)),
            "n": len(v),
            "chance": 0.25,
            "at_chance": bool(sum(v) / len(v) < 0.3),
        }
        for task, v in correct.items()
    }
    write(
        folder / "benchmark.json",
        {
            "suite": "paper",
            "tasks": tasks,
            "geometric_mean": 0.5,
            "samples_file": "benchmark.samples.jsonl",
            "skipped": {"logiqa2": "offline"},
        },
    )


@pytest.mark.slow
def test_report_compares_each_epoch_with_imitation_and_base_item_by_item(tmp_path):
    import numpy as np

    metrics = tmp_path / "metrics"
    rng = np.random.default_rng(0)
    base = {"arc_easy": rng.random(300) < 0.45, "piqa": rng.random(300) < 0.6}
    imitation = {task: v.copy() for task, v in base.items()}
    epoch_1 = {task: v | (rng.random(300) < 0.15) for task, v in imitation.items()}  # better on both
    fake_benchmark(metrics / "base", base)
    fake_benchmark(metrics / "imitation", imitation)
    fake_benchmark(metrics / "epochs" / "1", epoch_1)

    report = write_report(metrics, [1])
    reasoning = report["reasoning"]
    assert set(reasoning["checkpoints"]) == {"base", "imitation", "1"}
    assert reasoning["checkpoints"]["base"]["skipped"] == {"logiqa2": "offline"}
    assert reasoning["imitation"]["vs_base"]["pooled"]["diff"] == 0.0  # the same answers
    summary = json.loads((metrics / "details.json").read_text())["1"]["reasoning"]
    gain = np.mean(np.concatenate(list(epoch_1.values()))) - np.mean(np.concatenate(list(base.values())))
    for key in ("vs_imitation", "vs_base"):
        line = summary[key]
        assert set(line) == {"delta", "low", "high", "p_mcnemar", "mde", "items"}
        assert line["delta"] == pytest.approx(gain) and line["items"] == 600
        assert (
            0 < line["low"] < line["delta"] < line["high"]
            and line["p_mcnemar"] < 1e-6
            and 0 < line["mde"] < 0.05
        )
    with open(metrics / "plots" / "reasoning.csv", newline="") as f:
        rows = {(r["epoch"], r["series"]): float(r["value"]) for r in csv.DictReader(f)}
    assert rows == {
        ("0", "vs base"): 0.0,
        ("1", "vs imitation"): pytest.approx(gain),
        ("1", "vs base"): pytest.approx(gain),
    }
    assert (metrics / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_a_base_model_passed_over_leaves_only_the_comparison_with_imitation(tmp_path):
    """``evaluate.benchmark.base: false``: the base model's benchmark.json is a note; the report compares
    each epoch with imitation alone and plots no "vs base" series."""
    import numpy as np

    from spag.evaluate.reasoning import passed_over

    metrics = tmp_path / "metrics"
    rng = np.random.default_rng(1)
    imitation = {"arc_easy": rng.random(200) < 0.5}
    fake_benchmark(metrics / "imitation", imitation)
    fake_benchmark(
        metrics / "epochs" / "1", {task: v | (rng.random(200) < 0.1) for task, v in imitation.items()}
    )
    write(metrics / "base" / "benchmark.json", passed_over(base=False))
    (metrics / "base" / "benchmark.samples.jsonl").write_text("")

    report = write_report(metrics, [1])
    assert set(report["reasoning"]["checkpoints"]) == {"imitation", "1"}
    assert "vs_base" not in report["reasoning"]["imitation"]
    summary = json.loads((metrics / "details.json").read_text())["1"]["reasoning"]
    assert set(summary) == {"vs_imitation"} and summary["vs_imitation"]["items"] == 200
    with open(metrics / "plots" / "reasoning.csv", newline="") as f:
        assert {r["series"] for r in csv.DictReader(f)} == {"vs imitation"}
