"""scripts/card_rule.py on a tiny random model: the rule it teaches, its reading of a model (the exact way of
``spag strategy``, in both reply forms) and its output file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spag.testing import load_script as load_script_file
from spag.testing import make_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent


def load_script():
    return load_script_file(ROOT / "scripts" / "card_rule.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("card-rule") / "tiny")


def test_the_rule_plays_the_aggressive_action_with_k_alone_in_both_reply_forms():
    card_rule = load_script()
    plain, named = card_rule.examples("plain"), card_rule.examples("say_card")
    assert len(plain) == len(named) == 12
    for case in plain:
        assert case["opening"] == "" and case["taught"] == case["replies"][case["card"] != "K"]
        assert case["prompt"].endswith("].")  # "reply with [check] or [bet]."
    for case in named:
        assert case["opening"] == f"My card: {case['card']}." and case["replies"][0].startswith(" [")
        assert f'reply with "My card: {case["card"]}." and then' in case["prompt"]
    assert {c["taught"].strip() for c in named if c["card"] == "K"} == {"[bet]", "[call]"}
    assert {c["taught"].strip() for c in named if c["card"] != "K"} == {"[check]", "[fold]"}


@pytest.mark.parametrize("form", ["plain", "say_card"])
def test_its_reading_is_the_exact_way_of_spag_strategy(tiny, form):
    card_rule = load_script()
    from spag.evaluate.strategy import exact_rows
    from spag.play.engine import PlayConfig
    from spag.players import close_player, load_player

    untrained = card_rule.teach(tiny, form, learning_rate=1e-3, steps=0)
    player = load_player(str(tiny), "hf", device="cpu", dtype="float32")
    try:
        exact = exact_rows(player, PlayConfig.of("kuhn-poker", say_card=form == "say_card"))
    finally:
        close_player(player)
    assert [(r["card"], r["history"]) for r in untrained["rows"]] == [
        (r["card"], r["history"]) for r in exact
    ]
    for mine, theirs in zip(untrained["rows"], exact):
        assert mine["probability"] == pytest.approx(theirs["probability"], abs=1e-4)


def test_training_lowers_the_loss_and_the_figures_are_written_once(tiny, tmp_path, capsys):
    card_rule = load_script()
    out = tmp_path / "rule.json"
    argv = [
        "--model",
        str(tiny),
        "--learning-rate",
        "3e-3",
        "--steps",
        "12",
        "--replies",
        "say_card",
        "-o",
        str(out),
    ]
    assert card_rule.main(argv) == 0
    figures = json.loads(out.read_text())
    losses = figures["say_card"]["losses"]
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3])
    gap = figures["say_card"]["rule_gap"]
    rows = figures["say_card"]["rows"]
    assert gap == pytest.approx(card_rule.rule_gap(rows)) and -1 <= gap <= 1
    assert "plain" not in figures
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("[card_rule] rule gap")
    before = out.read_text()
    assert card_rule.main(argv) == 2  # never overwritten
    assert out.read_text() == before
    assert "[card_rule] error:" in capsys.readouterr().err
