"""Kuhn poker's exact figures (spag/game/kuhn/exploitability.py) and `spag strategy`, which reads a model's
strategy two ways (spag/evaluate/strategy.py)."""

from __future__ import annotations

import itertools
import json
import random

import pyspiel
import pytest
from open_spiel.python import policy
from open_spiel.python.algorithms import expected_game_score
from open_spiel.python.algorithms import exploitability as spiel

from spag.game.kuhn import CARDS, DEALS, FIRST, SECOND, KuhnPoker
from spag.game.kuhn.exploitability import (
    INFOSETS,
    TEACHER,
    UNITS,
    best_response,
    check_profile,
    constant,
    equilibrium,
    exploitability,
    figures,
    moves,
    payoff,
    seats,
    value,
)

# --------------------------------------------------------------------------------- the exact figures


@pytest.mark.parametrize("alpha", [0.0, 1 / 12, 1 / 6, 0.25, 1 / 3])
def test_every_equilibrium_of_kuhns_family_is_unexploitable_and_worth_minus_one_eighteenth(alpha):
    profile = equilibrium(alpha)
    assert exploitability(profile, "chips") == pytest.approx(0.0, abs=1e-12)
    assert value(profile, "chips") == pytest.approx(-1 / 18, abs=1e-12)
    # each seat's best response gains nothing over the profile's own value
    assert best_response(FIRST, profile) == pytest.approx(-1 / 18, abs=1e-12)
    assert best_response(SECOND, profile) == pytest.approx(1 / 18, abs=1e-12)


def test_the_uniform_profile_is_exploitable_by_eleven_24ths_of_a_chip_and_three_eighths_of_a_win():
    uniform = constant(0.5)
    assert exploitability(uniform, "chips") == pytest.approx(11 / 24, abs=1e-12)
    assert exploitability(uniform, "wins") == pytest.approx(3 / 8, abs=1e-12)


def test_always_bet_and_call_loses_a_third_of_a_chip_to_a_best_response_but_nothing_in_wins():
    always = constant(1.0)
    assert exploitability(always, "chips") == pytest.approx(1 / 3, abs=1e-12)
    assert exploitability(always, "wins") == pytest.approx(0.0, abs=1e-12)
    assert value(always, "chips") == pytest.approx(0.0, abs=1e-12)


def _hand(profile, deal: str, unit: str) -> int:
    """The first player's payoff of one deal, playing a pure profile move by move."""
    cards = deal.split("-")
    actions: tuple[str, ...] = ()
    while not (actions and (actions[-1] in ("call", "fold") or actions == ("check", "check"))):
        card = cards[len(actions) % 2]
        aggressive, passive = moves(actions)
        actions = (*actions, aggressive if profile[(card, ",".join(actions))] == 1.0 else passive)
    return payoff(cards[0], cards[1], actions, unit)


def _random_pure(rng: random.Random) -> dict:
    return {(i.card, i.history): float(rng.random() < 0.5) for i in INFOSETS}


@pytest.mark.parametrize("unit", UNITS)
def test_a_pure_profiles_value_is_the_mean_over_the_six_deals_played_out(unit):
    rng = random.Random(7)
    for profile in [constant(0.0), constant(1.0), *(_random_pure(rng) for _ in range(30))]:
        enumerated = sum(_hand(profile, deal, unit) for deal in DEALS) / len(DEALS)
        assert value(profile, unit) == pytest.approx(enumerated, abs=1e-12)


@pytest.mark.parametrize("unit", UNITS)
def test_a_best_response_is_the_best_of_the_seats_64_pure_strategies(unit):
    rng = random.Random(3)
    for _ in range(3):
        profile = {(i.card, i.history): rng.random() for i in INFOSETS}
        for seat in (FIRST, SECOND):
            mine = [(i.card, i.history) for i in INFOSETS if i.player == seat]
            best = float("-inf")
            for choice in itertools.product((0.0, 1.0), repeat=len(mine)):
                pure = {**profile, **dict(zip(mine, choice))}
                worth = value(seats(pure, profile) if seat == FIRST else seats(profile, pure), unit)
                best = max(best, worth if seat == FIRST else -worth)
            assert best_response(seat, profile, unit) == pytest.approx(best, abs=1e-12)


def _open_spiel_policy(game, profile):
    """``profile`` as OpenSpiel's tabular policy of its ``kuhn_poker``: an information state is the player's
    card (0 = J, 1 = Q, 2 = K) and the actions so far, ``p`` for a check or fold, ``b`` for a bet or call;
    action 1 is the aggressive one."""
    table = policy.TabularPolicy(game)
    letters = {"": "", "check": "p", "bet": "b", "check,bet": "pb"}
    for i in INFOSETS:
        p = profile[(i.card, i.history)]
        table.policy_for_key(f"{CARDS.index(i.card)}{letters[i.history]}")[:] = [1 - p, p]
    return table


def test_the_figures_in_chips_are_open_spiels_for_its_kuhn_poker():
    # An independent oracle: OpenSpiel's own game, policy value and best responses (chips: ante 1, bet 1).
    game = pyspiel.load_game("kuhn_poker")
    rng = random.Random(11)
    profiles = [
        constant(0.0),
        constant(0.5),
        constant(1.0),
        equilibrium(0.0),
        equilibrium(1 / 3),
        *({(i.card, i.history): rng.random() for i in INFOSETS} for _ in range(40)),
        *(_random_pure(rng) for _ in range(20)),
    ]
    for profile in profiles:
        table = _open_spiel_policy(game, profile)
        worth = expected_game_score.policy_value(game.new_initial_state(), [table, table])
        gains = spiel.nash_conv(game, table, return_only_nash_conv=False).player_improvements
        assert value(profile, "chips") == pytest.approx(worth[0], abs=1e-12)
        assert best_response(FIRST, profile, "chips") == pytest.approx(worth[0] + gains[0], abs=1e-12)
        assert best_response(SECOND, profile, "chips") == pytest.approx(worth[1] + gains[1], abs=1e-12)
        assert exploitability(profile, "chips") == pytest.approx(spiel.exploitability(game, table), abs=1e-12)


def test_the_teacher_against_itself_and_the_figures_say_so():
    out = figures(TEACHER, "chips")
    assert out["vs_equilibrium_first"] == pytest.approx(-1 / 18)
    assert out["vs_equilibrium_second"] == pytest.approx(1 / 18)
    always = figures(constant(1.0), "chips")
    # always betting and calling against the equilibrium: loses in both seats
    assert always["vs_equilibrium_first"] < -1 / 18 and always["vs_equilibrium_second"] < 1 / 18


def test_a_profile_without_an_information_set_or_with_a_bad_probability_is_refused_by_name():
    profile = dict(TEACHER)
    del profile[("Q", "bet")]
    with pytest.raises(ValueError, match="second player's call with Q after bet"):
        exploitability(profile)
    with pytest.raises(ValueError, match="first player's bet with J after no action: 1.5"):
        check_profile({**TEACHER, ("J", ""): 1.5})


def test_the_equilibrium_teacher_plays_the_profile_the_figures_call_the_teacher():
    from spag.evaluate.strategy import state
    from spag.game.kuhn import EQUILIBRIUM, TableStrategy
    from spag.players.base import Speaker, Turn

    teacher = TableStrategy(Speaker(None), EQUILIBRIUM, seed=0)
    game = KuhnPoker()
    for infoset in INFOSETS:
        deal, history = state(infoset)
        turn = Turn(
            infoset.player, deal, history, game.prompt(infoset.player, deal, history, game.Strategies())
        )
        share = sum(teacher.action(turn) == infoset.action for _ in range(3000)) / 3000
        assert share == pytest.approx(TEACHER[(infoset.card, infoset.history)], abs=0.04), infoset


# ------------------------------------------------------------------------------ a model's strategy


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from spag.testing import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


@pytest.mark.parametrize("say_card", [False, True], ids=["plain", "say_card"])
def test_the_exact_way_is_the_canonical_replies_probability_from_a_plain_forward_pass(tiny, say_card):
    import torch

    from spag.evaluate.strategy import exact_rows, state
    from spag.play.engine import PlayConfig
    from spag.players import load_player

    player = load_player(str(tiny), "hf", device="cpu", dtype="float32")
    config = PlayConfig.of("kuhn-poker", say_card=say_card)
    rows = exact_rows(player, config)
    assert [(r["player"], r["card"], r["history"], r["action"]) for r in rows] == [tuple(i) for i in INFOSETS]
    for row, infoset in zip(rows, INFOSETS):
        prompt = config.prompt(infoset.player, *state(infoset))
        passive = {"bet": "check", "call": "fold"}[infoset.action]
        # with say_card: the action's reply after the opening that names the card, given that opening
        opening = f"My card: {infoset.card}." if say_card else ""
        prefix = player.encode(prompt) + player.tokenizer(opening, add_special_tokens=False)["input_ids"]
        lead = " " if say_card else ""
        logps = []
        for text in (f"{lead}[{infoset.action}]", f"{lead}[{passive}]"):
            ids = player.tokenizer(text, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logits = player.model(input_ids=torch.tensor([prefix + ids])).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            logps.append(sum(float(logp[len(prefix) - 1 + k, t]) for k, t in enumerate(ids)))
        p, q = (float(torch.tensor(lp).exp()) for lp in logps)
        assert row["probability"] == pytest.approx(p / (p + q), abs=1e-4)
        assert row["mass"] == pytest.approx(p + q, rel=1e-3)


def test_spag_strategy_writes_the_rows_and_figures_of_a_checkpoint(tiny, tmp_path):
    from spag.testing import run_cli

    out = tmp_path / "strategy"
    result = run_cli("strategy", tiny, "-o", out, "--samples", 3, "--max-new-tokens", 4, "--temperature", 1)
    assert result.code == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("[spag strategy]")
    rows = [json.loads(line) for line in (out / "strategy.jsonl").read_text().splitlines()]
    assert [r["way"] for r in rows] == ["exact"] * 12 + ["played"] * 12
    for way in ("exact", "played"):
        mine = [r for r in rows if r["way"] == way]
        assert {(r["player"], r["card"], r["history"], r["action"]) for r in mine} == {
            tuple(i) for i in INFOSETS
        }
    for row in rows:
        assert 0.0 <= row["probability"] <= 1.0
        if row["way"] == "exact":
            assert 0.0 < row["mass"] <= 1.0
        else:
            assert row["replies"] == 3 and 0.0 <= row["low"] <= row["probability"] <= row["high"] <= 1.0
            shares = row["aggressive_share"] + row["passive_share"] + row["broken_share"]
            assert shares == pytest.approx(1.0)
    report = json.loads((out / "exploitability.json").read_text())
    assert set(report) == {"exact", "played"}
    for way in report.values():
        for unit in UNITS:
            assert set(way[unit]) >= {
                "exploitability",
                "value_first",
                "vs_equilibrium_first",
                "vs_equilibrium_second",
            }
            assert way[unit]["exploitability"] >= -1e-12
    # the 12 information sets as a table, a line each
    table = [line for line in result.stdout.splitlines() if line.startswith(("first ", "second "))]
    assert len(table) == 12 and table[0].split()[:5] == ["first", "J", "no", "action", "yet"]
    # a written strategy (its file, or the folder) is printed as the same table, with its exploitability
    shown = run_cli("strategy", out / "strategy.jsonl")
    assert (
        shown.code == 0
        and [line for line in shown.stdout.splitlines() if line.startswith(("first ", "second "))] == table
    )
    assert "chips exploitability exact" in shown.stderr.strip().splitlines()[-1]
    assert run_cli("strategy", out).stdout == shown.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"way": "exact", "card": "A", "history": "", "probability": 0.5}) + "\n")
    refused = run_cli("strategy", bad)
    assert refused.code == 2 and refused.error_lines() == [
        f"error: {bad}: record 0: not a strategy row (way, card, "
        "history and probability, as spag strategy writes them)"
    ]
    assert run_cli("strategy", tiny).code == 2  # a model needs -o
    # a second run into the same folder needs --overwrite, and then replaces it
    again = run_cli("strategy", tiny, "-o", out, "--samples", 1, "--max-new-tokens", 2)
    assert again.code == 2 and "--overwrite" in again.stderr
    assert (
        run_cli("strategy", tiny, "-o", out, "--samples", 1, "--max-new-tokens", 2, "--overwrite").code == 0
    )
    assert json.loads((out / "strategy.jsonl").read_text().splitlines()[-1])["replies"] == 1
    # M6 (fourth attack): with one file changed by hand, --overwrite wrote the rows and then refused the
    # figures, leaving new rows beside old figures; both are checked before any sampling now
    (out / "exploitability.json").write_text("{}")
    kept = (out / "strategy.jsonl").read_text()
    refused = run_cli("strategy", tiny, "-o", out, "--samples", 2, "--overwrite")
    assert refused.code == 2 and "exploitability.json" in refused.stderr and len(refused.error_lines()) == 1
    assert (out / "strategy.jsonl").read_text() == kept and (out / "exploitability.json").read_text() == "{}"


def test_the_played_way_reads_each_reply_with_the_games_parser(tmp_path):
    """A model that always says ``[bet]``: it bets wherever it may, and breaks the rules facing a bet."""
    from spag.evaluate.strategy import played_rows
    from spag.play.engine import PlayConfig
    from spag.players import load_player
    from spag.testing import make_scripted_checkpoint

    player = load_player(str(make_scripted_checkpoint(tmp_path / "bets", "[bet]")), "hf", device="cpu")
    rows = played_rows(player, PlayConfig.of("kuhn-poker", temperature=0.0, max_new_tokens=6), 2)
    for row in rows:
        if row["action"] == "bet":
            assert (row["probability"], row["broken_share"]) == (1.0, 0.0), row
        else:
            assert (row["probability"], row["low"], row["high"], row["broken_share"]) == (
                0.5,
                0.0,
                1.0,
                1.0,
            ), row


def test_spag_strategy_refuses_another_game_in_one_line(tiny, tmp_path):
    from spag.testing import run_cli

    result = run_cli("strategy", tiny, "-o", tmp_path / "out", "--game", "taboo")
    assert result.code == 2 and len(result.error_lines()) == 1
    assert "--game" in result.stderr and "kuhn-poker" in result.stderr
    assert not (tmp_path / "out").exists()
    params = tmp_path / "params.yaml"
    params.write_text("game: {name: taboo}\n")
    result = run_cli("strategy", tiny, "-o", tmp_path / "out", "--params", params)
    assert result.code == 2 and "game.name" in result.stderr and str(params) in result.stderr


def test_the_report_of_the_exact_way_alone():
    """Where only the exact way was read (its mass passed the bar), the report holds that way and no played one."""
    from spag.evaluate.strategy import exploitability_report
    from spag.game.kuhn.exploitability import INFOSETS, all_figures, equilibrium

    profile = equilibrium()
    rows = [
        {
            "way": "exact",
            "card": i.card,
            "history": i.history,
            "probability": profile[(i.card, i.history)],
            "mass": 0.95 + n / 1000,
        }
        for n, i in enumerate(INFOSETS)
    ]
    report = exploitability_report(rows, {"exact": all_figures(profile)})
    assert set(report) == {"exact"} and report["exact"]["mass_min"] == 0.95
    assert report["exact"]["chips"]["exploitability"] == pytest.approx(0, abs=1e-12)
