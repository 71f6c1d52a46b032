"""The tabular twin of the loop (spag/train/twin.py) and CFR (spag/game/kuhn/cfr.py): what the algorithm
itself can learn on Kuhn poker, without a language model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyspiel
import pytest
import torch
from open_spiel.python.algorithms import cfr as spiel_cfr

from spag.config import Reward, load_settings
from spag.game.kuhn import CARDS
from spag.game.kuhn.cfr import CFR, cfr_curve
from spag.game.kuhn.exploitability import INFOSETS, constant, equilibrium, exploitability
from spag.train.twin import FACING_A_BET, INDEX, TwinLoop, logits_of, offline_update, profile_of, run_twin

ROOT = Path(__file__).resolve().parent.parent
PRESET = load_settings(ROOT / "params.yaml", [ROOT / "configs" / "kuhn-poker.yaml"])
LOOP = TwinLoop.of(PRESET)
UNIFORM = constant(0.5)


def loop(**changes) -> TwinLoop:
    reward = changes.pop("reward", {})
    spag = changes.pop("spag", {})
    return dataclasses.replace(
        LOOP, reward=LOOP.reward.model_copy(update=reward), spag=LOOP.spag.model_copy(update=spag), **changes
    )


# ------------------------------------------------------------------------------------------------ CFR


def test_cfr_keeps_open_spiels_average_policy_iteration_by_iteration():
    game = pyspiel.load_game("kuhn_poker")
    theirs, mine = spiel_cfr.CFRSolver(game), CFR()
    letters = {"": "", "check": "p", "bet": "b", "check,bet": "pb"}
    for _ in range(60):
        theirs.evaluate_and_update_policy()
        mine.iterate()
        average, ours = theirs.average_policy(), mine.average()
        for i in INFOSETS:
            assert ours[(i.card, i.history)] == pytest.approx(
                average.policy_for_key(f"{CARDS.index(i.card)}{letters[i.history]}")[1], abs=1e-12
            )


def test_cfr_approaches_an_equilibrium():
    curve = [p["exploitability"] for p in cfr_curve(1000)]
    # the first iteration plays its uniform start, so the average after it is uniform: 11/24
    assert curve[0] == pytest.approx(exploitability(UNIFORM)) and curve[1] < curve[0]
    assert curve[99] < 0.02 and curve[999] < 0.005 and curve[999] < curve[99]


# --------------------------------------------------------------------------------------------- the twin


def test_the_twin_takes_the_pipelines_settings():
    assert (LOOP.hands, LOOP.epochs, LOOP.temperature, LOOP.max_turns) == (96, 2, 1.2, 2)
    assert LOOP.kl_coeff == 0.2 and LOOP.spag.clip_range == 0.2 and LOOP.spag.batch_size == 4
    assert LOOP.learning_rate == PRESET.twin.learning_rate
    with pytest.raises(ValueError, match="the twin plays Kuhn poker"):
        TwinLoop.of(load_settings(ROOT / "params.yaml"))


def test_logits_and_profiles_round_trip():
    profile = equilibrium(0.2)
    back = profile_of(logits_of(profile))
    assert all(
        back[key] == pytest.approx(min(max(p, 1e-6), 1 - 1e-6), abs=1e-12) for key, p in profile.items()
    )
    assert profile_of(logits_of(profile), temperature=0)[("K", "")] == 1.0


def test_one_step_on_a_rewarded_row_moves_its_logit_by_the_learning_rate():
    """AdamW's first step moves each logit by the learning rate, in the direction of its gradient: a row that
    calls with K at reward +1 raises that logit by 0.1 and leaves the 11 others alone."""
    twin = loop(learning_rate=0.1, spag={"warmup_ratio": 0.0})
    logits = logits_of(UNIFORM).requires_grad_(True)
    episode = {
        "target_word": "Q-K",
        "history": [{"role": "first", "content": "[bet]"}, {"role": "second", "content": "[call]"}],
    }
    row = {"episode": "0", "turn": 1, "reward": 1.0, "weight": 1.0}
    assert offline_update(logits, [row], [episode], twin, torch.Generator().manual_seed(0)) == 1
    moved = logits.detach() - logits_of(UNIFORM)
    assert moved[INDEX[("K", "bet")]].item() == pytest.approx(0.1, rel=1e-6)
    assert moved.abs().sum().item() == pytest.approx(0.1, rel=1e-6)


def test_from_uniform_the_winners_rule_never_learns_to_fold():
    """A fold never wins a hand, so with SPAG's own rule (the winner's lines, a win as the payoff) no fold is
    ever rewarded: folds are played, but P(fold) facing a bet never rises anywhere, and with J, whose calls
    never win either, it stays where it started."""
    winners = loop(epochs=8, reward={"payoff": "wins"})
    for seed in range(3):
        points = run_twin(UNIFORM, winners, seed)
        assert all(p["folds"] > 0 for p in points[1:])
        for point in points:
            calls = point["probabilities"]
            for card, history in FACING_A_BET:
                player = "second" if history == "bet" else "first"
                assert calls[f"{player} {card} {history}"] >= 0.5 - 1e-9  # P(fold) = 1 - P(call) never rises
            assert calls["second J bet"] == pytest.approx(0.5) and calls[
                "first J check,bet"
            ] == pytest.approx(0.5)


def test_with_chips_for_both_players_the_twin_falls_below_the_never_fold_floor():
    """Paying both players their chips rewards a fold that saves a chip: from uniform (11/24) every seed ends
    four epochs of the preset's 96 hands below 1/3, the floor of every profile that never folds, and folds J
    facing a bet more often than it started."""
    chips = loop(epochs=4, reward={"payoff": "chips"})
    for seed in range(5):
        points = run_twin(UNIFORM, chips, seed)
        assert points[0]["exploitability"] == pytest.approx(11 / 24)
        assert points[-1]["exploitability"] < 1 / 3
        assert points[-1]["probabilities"]["second J bet"] < 0.5
        assert [p["hands"] for p in points[1:]] == [96] * 4


def test_a_card_blind_twin_stays_on_the_floor_that_the_twin_passes():
    """With one update for J, Q and K (the model's shared weights in the limit) the same chips loop from
    uniform keeps the three cards alike and never passes 1/3, the floor of every profile that plays its cards
    alike, where the twin of 12 free logits falls below it (the test above) on the same hands' seeds."""
    blind = loop(epochs=4, reward={"payoff": "chips"}, card_blind=True)
    for seed in range(3):
        points = run_twin(UNIFORM, blind, seed)
        for point in points:
            assert point["exploitability"] >= 1 / 3 - 1e-9
            p = point["probabilities"]
            for player, history in (
                ("first", "opening"),
                ("second", "bet"),
                ("second", "check"),
                ("first", "check,bet"),
            ):
                assert p[f"{player} J {history}"] == pytest.approx(p[f"{player} K {history}"], abs=1e-12)
        assert points[-1]["probabilities"] != points[0]["probabilities"]  # it moves, card-blind


def test_online_self_play_updates_at_every_step_of_its_own_hands():
    online = loop(epochs=2, reward={"payoff": "chips"}, spag={"method": "online"})
    points = run_twin(UNIFORM, online, 0)
    words, per_step = online.online.words, online.online.words_per_step
    assert [p["steps"] for p in points[1:]] == [words // per_step] * 2
    assert [p["hands"] for p in points[1:]] == [words * online.online.games_per_word] * 2
    assert points[-1]["probabilities"] != points[0]["probabilities"]


def test_the_same_seed_gives_the_same_twin_and_another_seed_another():
    first, again, other = (run_twin(UNIFORM, LOOP, seed) for seed in (3, 3, 4))
    assert first == again and first != other


def test_a_control_arm_has_no_game_rows_to_learn_from():
    points = run_twin(UNIFORM, loop(spag={"control": True}), 0)
    assert all(p["probabilities"] == points[0]["probabilities"] for p in points)
    assert Reward().payoff == "wins"
