"""Tournament: Bradley-Terry/Elo fitting, bootstrap intervals, win matrices, heatmap, and the command."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from spag.evaluate.tournament import (
    ELO_MEAN,
    Match,
    _pair_tables,
    elo_ratings,
    expected_score,
    fit_bradley_terry,
    games_from_episodes,
    save_heatmap,
    tournament_metrics,
    unique_names,
    win_matrices,
)
from spag.game.taboo.outcomes import ATTACKER_BREAKS_RULES, ATTACKER_WINS, DEFENDER_WINS, TIE


def tables(games, k):
    a = np.array([g.a for g in games])
    b = np.array([g.b for g in games])
    s = np.array([g.score_a for g in games], dtype=float)
    return _pair_tables(a, b, s, k)


def test_two_models_match_the_closed_form_without_prior():
    # 30 points of 40: the maximum-likelihood odds are 3:1, a gap of 400 * log10(3) Elo.
    games = [Match(0, 1, 1.0)] * 30 + [Match(0, 1, 0.0)] * 10
    ratings = fit_bradley_terry(*tables(games, 2), prior_draws=0.0)
    assert ratings[0] - ratings[1] == pytest.approx(400 * math.log10(3), abs=1e-6)
    assert ratings.mean() == pytest.approx(ELO_MEAN)


def test_ties_count_as_half_a_win():
    ties = fit_bradley_terry(*tables([Match(0, 1, 0.5)] * 4, 2), prior_draws=0.0)
    split = fit_bradley_terry(*tables([Match(0, 1, 1.0), Match(0, 1, 0.0)] * 2, 2), prior_draws=0.0)
    assert ties == pytest.approx(split) and ties == pytest.approx([1000.0, 1000.0])


def test_fit_is_the_likelihood_maximum():
    # At the maximum, each model's expected points equal its actual points (prior draws included).
    rng = np.random.default_rng(1)
    games = [
        Match(int(i), int(j), float(rng.choice([0.0, 0.5, 1.0], p=[0.3, 0.1, 0.6])))
        for i, j in (rng.choice(4, 2, replace=False) for _ in range(300))
    ]
    points, played = tables(games, 4)
    ratings = fit_bradley_terry(points, played, prior_draws=1.0)
    met = (played > 0) & ~np.eye(4, dtype=bool)
    points, played = points + 0.5 * met, played + met
    expected = np.array([[expected_score(ratings[i], ratings[j]) for j in range(4)] for i in range(4)])
    assert (played * expected).sum(axis=1) == pytest.approx(points.sum(axis=1), abs=1e-6)


def test_a_model_that_always_wins_is_rated_highest_and_finite():
    games = []
    for opponent in (1, 2):
        games += [Match(0, opponent, 1.0)] * 10 + [Match(opponent, 0, 0.0)] * 10
    games += [Match(1, 2, 1.0)] * 12 + [Match(1, 2, 0.0)] * 8 + [Match(2, 1, 0.5)] * 20
    elo = elo_ratings(games, 3, resamples=200, seed=0)
    rating = elo["rating"]
    assert np.all(np.isfinite(rating))
    assert rating[0] > rating[1] > rating[2]
    assert rating.mean() == pytest.approx(ELO_MEAN)
    assert np.all(elo["low"] <= rating + 1e-9) and np.all(rating <= elo["high"] + 1e-9)


def test_equal_records_give_equal_ratings():
    # Everyone beats everyone else once in each role: all equal.
    cycle = [
        Match(0, 1, 1.0),
        Match(1, 0, 1.0),
        Match(1, 2, 1.0),
        Match(2, 1, 1.0),
        Match(2, 0, 1.0),
        Match(0, 2, 1.0),
    ]
    assert elo_ratings(cycle * 4, 3, resamples=0)["rating"] == pytest.approx([1000.0] * 3, abs=1e-6)
    # 0 and 1 have the same record against 2 and split their own games: equal to each other, above 2.
    games = [
        Match(0, 2, 1.0),
        Match(0, 2, 0.5),
        Match(1, 2, 1.0),
        Match(1, 2, 0.5),
        Match(0, 1, 1.0),
        Match(1, 0, 1.0),
    ]
    rating = elo_ratings(games * 3, 3, resamples=0)["rating"]
    assert rating[0] == pytest.approx(rating[1], abs=1e-6) and rating[0] > rating[2]


def test_bootstrap_interval_contains_the_estimate_and_shrinks_with_games():
    rng = np.random.default_rng(0)
    truth = np.array([1150.0, 1000.0, 850.0])

    def simulate(n):
        out = []
        for _ in range(n):
            i, j = (int(x) for x in rng.choice(3, 2, replace=False))
            # every game on a word of its own: independent games
            out.append(Match(i, j, float(rng.random() < expected_score(truth[i], truth[j])), len(out)))
        return out

    small, large = elo_ratings(simulate(60), 3, resamples=300), elo_ratings(simulate(1500), 3, resamples=300)
    for elo in (small, large):
        assert np.all(elo["low"] <= elo["rating"]) and np.all(elo["rating"] <= elo["high"])
    assert np.all(large["high"] - large["low"] < small["high"] - small["low"])
    # With 1500 games the true ratings are recovered within the intervals.
    assert np.all(large["low"] - 30 <= truth) and np.all(truth <= large["high"] + 30)


def test_bootstrap_is_reproducible_with_a_seed():
    games = [Match(0, 1, 1.0), Match(1, 0, 0.5), Match(0, 1, 0.0)] * 7
    a, b = elo_ratings(games, 2, resamples=100, seed=3), elo_ratings(games, 2, resamples=100, seed=3)
    assert np.array_equal(a["low"], b["low"]) and np.array_equal(a["high"], b["high"])


# --------------------------------------------------------------------------------- episodes and matrices


def ep(attacker, defender, outcome, word="apple"):
    return {"attacker_model": attacker, "defender_model": defender, "outcome": outcome, "target_word": word}


EPISODES = [
    ep("a", "b", ATTACKER_WINS),
    ep("a", "b", DEFENDER_WINS),
    ep("a", "b", TIE),
    ep("a", "b", ATTACKER_BREAKS_RULES),
    ep("b", "a", ATTACKER_WINS),
    ep("b", "a", DEFENDER_WINS),
    ep("b", "a", DEFENDER_WINS),
    ep("b", "a", TIE),
]


def test_games_from_episodes_score_the_attacker():
    games = games_from_episodes(EPISODES, ["a", "b"])
    assert [g.score_a for g in games] == [1.0, 0.0, 0.5, 0.0, 1.0, 0.0, 0.0, 0.5]
    assert (games[0].a, games[0].b, games[4].a, games[4].b) == (0, 1, 1, 0)
    with pytest.raises(ValueError, match="not in the tournament"):
        games_from_episodes([ep("a", "c", TIE)], ["a", "b"])


def test_win_matrices_over_both_roles():
    m = win_matrices(games_from_episodes(EPISODES, ["a", "b"]), ["a", "b"])
    # a: as attacker 1 win, 1 tie; as defender 2 wins, 1 tie  -> 3 wins, 2 ties in 8 games
    assert m["win_rate"]["a"]["b"] == pytest.approx(3 / 8)
    assert m["score"]["a"]["b"] == pytest.approx(4 / 8)
    assert m["win_rate"]["b"]["a"] == pytest.approx(3 / 8)
    assert m["score"]["a"]["b"] + m["score"]["b"]["a"] == pytest.approx(1.0)
    assert m["games_played"]["a"]["b"] == 8 and "a" not in m["win_rate"]["a"]


def test_tournament_metrics_are_plain_numbers(tmp_path):
    metrics = tournament_metrics(EPISODES, ["a", "b"], resamples=50)
    assert metrics["games"] == 8
    assert metrics["elo"]["a"]["rating"] == pytest.approx(metrics["elo"]["b"]["rating"])  # 4 points each
    json.dumps(metrics)


def test_heatmap_is_a_png(tmp_path):
    matrix = {"a": {"b": 0.7, "c": 0.4}, "b": {"a": 0.2, "c": 0.5}, "c": {"a": 0.5, "b": 0.5}}
    path = tmp_path / "plots" / "heat.png"
    save_heatmap(matrix, ["a", "b", "c"], path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_unique_names():
    assert unique_names(["runs/x/model", "runs/y/model", "base"]) == ["x/model", "y/model", "base"]
    assert unique_names(["/a/imitation/", "/a/epoch_1"]) == ["imitation", "epoch_1"]
    with pytest.raises(ValueError, match="twice"):
        unique_names(["m", "m"])


# ------------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_tournament_command_on_tiny_models(tmp_path):
    from spag.testing import make_tiny_checkpoint

    models = [make_tiny_checkpoint(tmp_path / name, seed=i) for i, name in enumerate(["m0", "m1", "m2"])]
    words = tmp_path / "eval.txt"
    words.write_text("river\ncoffee\n")
    out, heat, episodes = tmp_path / "t.json", tmp_path / "t.png", tmp_path / "episodes"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "tournament",
            "--models",
            *map(str, models),
            "--words",
            str(words),
            "-o",
            str(out),
            "--heatmap",
            str(heat),
            "--episodes-out",
            str(episodes),
            "--max-turns",
            "1",
            "--max-new-tokens",
            "8",
            "--batch-size",
            "4",
            "--resamples",
            "100",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(out.read_text())
    assert metrics["models"] == ["m0", "m1", "m2"]
    assert metrics["games"] == 3 * 2 * 2  # ordered pairs x words
    assert all(n == 4 for row in metrics["games_played"].values() for n in row.values())  # 2 words x 2 roles
    for name in metrics["models"]:
        elo = metrics["elo"][name]
        assert elo["low"] <= elo["rating"] <= elo["high"]
        assert set(metrics["win_rate"][name]) == set(metrics["models"]) - {name}
    assert sum(e["rating"] for e in metrics["elo"].values()) / 3 == pytest.approx(1000.0)
    assert heat.read_bytes()[:4] == b"\x89PNG"
    assert len(list(episodes.glob("*.parquet"))) == 6
    assert "[spag tournament]" in result.stderr


def test_players_drop_their_kept_prompts_after_each_match(tmp_path):
    """Every model of a tournament is held at once; what each keeps between calls (the hf prefix store)
    is dropped after each match, so eight models do not keep 2 GB of prompts each."""
    from spag.evaluate.tournament import _round_robin
    from spag.play.engine import PlayConfig
    from spag.players import close_player, load_player
    from spag.testing import make_tiny_checkpoint

    players = [
        load_player(str(make_tiny_checkpoint(tmp_path / f"m{i}", seed=i)), device="cpu", dtype="float32")
        for i in range(2)
    ]
    try:
        players[0].generate(
            ["a prompt long enough to be kept for the next call"] * 2, max_new_tokens=2, seed=0
        )
        assert players[0]._store.entries  # kept between calls, as in self-play
        config = PlayConfig.of(max_turns=1, temperature=0.0, max_new_tokens=4)
        episodes = _round_robin(
            players, ["m0", "m1"], ["river", "coffee"], config, None, False, False, held=players
        )
        assert len(episodes) == 4
        assert not any(p._store.entries for p in players)
    finally:
        close_player(*players)


@pytest.mark.parametrize(
    "option, hint", [(["--filtered", "M"], "--filtered"), (["--baselines", "base-teacher"], "--baselines")]
)
def test_a_kuhn_poker_tournament_with_a_filter_or_a_baseline_is_refused_in_one_line(tmp_path, option, hint):
    """M4 (fourth attack): `--game kuhn-poker ... --filtered M` ended in a ValueError traceback, and a
    baseline was refused with "expected one of none"."""
    from spag.testing import make_tiny_checkpoint, run_cli

    model = make_tiny_checkpoint(tmp_path / "m")
    words = tmp_path / "deals.txt"
    words.write_text("K-Q\n")
    result = run_cli(
        "tournament",
        "--game",
        "kuhn-poker",
        "--models",
        f"M={model}",
        f"N={model}",
        "--words",
        words,
        "-o",
        tmp_path / "t.json",
        *option,
    )
    assert result.code == 2 and "Traceback" not in result.stderr and not (tmp_path / "t.json").exists()
    assert (
        hint in result.stderr
        and "the game kuhn-poker has no baselines and no decode-time filter" in result.stderr
    )
