"""What the evaluation adds to a score: word-clustered statistics, skill metrics, no-training baselines."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spag.game.taboo import Taboo
from spag.game.taboo.outcomes import ATTACKER, ATTACKER_BREAKS_RULES, DEFENDER
from spag.game.taboo.rules import PREDICTION_PHRASE
from spag.play.engine import PlayConfig, play_games
from spag.players import load_player
from spag.runtime.statistics import clustered_mean, paired_difference, two_way_mean
from spag.testing import make_scripted_checkpoint, make_tiny_checkpoint

# ------------------------------------------------------------------------------- clustered statistics


def test_clustered_mean_weights_words_by_their_games_and_resamples_words():
    entry = clustered_mean([3, 0, 1], [4, 2, 2], n_resamples=2000)
    assert entry["value"] == pytest.approx(4 / 8) and entry["games"] == 8 and entry["words"] == 3
    assert entry["low"] <= 0.5 <= entry["high"]
    # the extremes of a word resample: all words "a" (3/4) or all "b" (0)
    assert entry["low"] >= 0.0 and entry["high"] <= 0.75


def test_paired_difference_uses_only_shared_words_and_cancels_what_they_share():
    a = {"x": (1.0, 2), "y": (2.0, 2), "z": (0.0, 2), "only_a": (2.0, 2)}
    b = {"x": (0.0, 2), "y": (1.0, 2), "z": (-1.0, 2)}
    entry = paired_difference(a, b, n_resamples=2000)
    # every shared word differs by exactly 1 point over 2 games: the difference is 0.5 whatever is drawn
    assert entry["words"] == 3 and entry["value"] == pytest.approx(0.5)
    assert entry["low"] == pytest.approx(0.5) and entry["high"] == pytest.approx(0.5)


def test_paired_difference_of_an_arm_with_itself_is_zero():
    a = {f"w{i}": (float(i % 3), 2) for i in range(20)}
    entry = paired_difference(a, a)
    assert (entry["value"], entry["low"], entry["high"]) == (0.0, 0.0, 0.0)


def test_two_way_mean_covers_both_run_and_word_variation():
    rng = np.random.default_rng(0)
    words = rng.normal(0, 1, 30)
    same_runs = np.tile(words, (5, 1))  # runs agree: only words vary
    spread_runs = same_runs + rng.normal(0, 3, (5, 1))  # runs differ by a constant each
    narrow, wide = two_way_mean(same_runs, n_resamples=2000), two_way_mean(spread_runs, n_resamples=2000)
    assert narrow["runs"] == 5 and len(wide["per_run"]) == 5
    assert narrow["low"] <= narrow["value"] <= narrow["high"]
    assert (wide["high"] - wide["low"]) > 1.5 * (narrow["high"] - narrow["low"])


# ------------------------------------------------------------------------------------- skill metrics


@pytest.fixture(scope="module")
def player(tmp_path_factory):
    return load_player(
        str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "m")), "hf", device="cpu", dtype="float32"
    )


@pytest.mark.parametrize("fast", [True, False], ids=["the engine's prefill", "one prompt at a time"])
def test_continuation_logprobs_equal_a_plain_forward_pass_per_word(player, fast, monkeypatch):
    from spag.game.taboo.prompts import build_prompt

    monkeypatch.setattr(player, "fast", fast)  # without the fast path: transformers lacks a piece of it

    # Two prompts with a common beginning (run once) and words of one token and of several (two passes).
    prompts = [
        build_prompt(DEFENDER, "", [{"role": ATTACKER, "content": line}], 2)
        for line in ("You drink it in the morning.", "It is hot and brown.")
    ]
    words = ["coffee", "tea", "morning", "a", "teapot", "xylophone"]
    lengths = {len(player.tokenizer(" " + w, add_special_tokens=False)["input_ids"]) for w in words}
    assert 1 in lengths and max(lengths) > 1
    got = player.continuation_logprobs(prompts, PREDICTION_PHRASE, words)
    assert got.shape == (2, len(words))
    for row, prompt in enumerate(prompts):
        prefix = (
            player.encode(prompt) + player.tokenizer(PREDICTION_PHRASE, add_special_tokens=False)["input_ids"]
        )
        for k, word in enumerate(words):
            ids = player.tokenizer(" " + word, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logp = torch.log_softmax(
                    player.model(input_ids=torch.tensor([prefix + ids])).logits[0].float(), -1
                )
            expected = sum(float(logp[len(prefix) - 1 + i, t]) for i, t in enumerate(ids))
            assert float(got[row, k]) == pytest.approx(expected, abs=1e-4), (row, word)


def test_shared_prefix_length_leaves_every_sequence_a_token_of_its_own():
    from spag.models.batching import shared_prefix_length

    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5]]) == 3
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2
    assert shared_prefix_length([[1, 2], [3, 2]]) == 0
    assert shared_prefix_length([[1, 2, 3]]) == 0


def test_ranks_put_the_best_first_and_share_ties():
    from spag.game.taboo.skill import ranks

    scores = torch.tensor([[0.1, 0.9, 0.5], [0.2, 0.2, 0.2], [3.0, 1.0, 1.0]])
    assert ranks(scores, [1, 0, 2]) == [1.0, 2.0, 2.5]


def test_the_judge_never_reads_the_target_word(player):
    from spag.game.taboo.skill import clue_ranks

    candidates = ["coffee", "river", "garden"]
    said = clue_ranks(player, [("coffee", "Coffee is what coffee drinkers drink.")], candidates)
    blanked = clue_ranks(player, [("coffee", "___ is what ___ drinkers drink.")], candidates)
    assert said == blanked and 1 <= said[0] <= 3


def test_guess_rank_is_the_defenders_own_ordering(player):
    from spag.game.taboo.skill import guess_ranks

    config = PlayConfig.of(max_turns=2)
    candidates = ["coffee", "river", "garden", "window"]
    clues = [(w, "It is something people like.") for w in candidates]
    got = guess_ranks(player, clues, candidates, config)
    prompt = config.prompt(DEFENDER, "", [{"role": ATTACKER, "content": "It is something people like."}])
    scores = player.continuation_logprobs([prompt], PREDICTION_PHRASE, candidates)[0]
    order = [candidates[i] for i in torch.argsort(scores, descending=True)]
    assert got == [order.index(w) + 1.0 for w in candidates]  # the same line: ranks 1..4 in the model's order


def test_skill_of_a_model_against_itself_is_no_change(player):
    from spag.game.taboo.skill import clue_set, compare_skill, measure_skill

    config = PlayConfig.of(max_turns=2, temperature=1.0, max_new_tokens=8, seed=3)
    words = ["coffee", "river", "garden"]
    clues = clue_set(player, words, config, per_word=2)
    assert len(clues) == 6 and all(
        "coffee" not in c["line"].lower() for c in clues if c["target_word"] == "coffee"
    )
    skill = measure_skill(player, player, words, config, clues, lines_per_word=2)
    assert skill["candidates"] == 3 and skill["clue_rank"]["chance"] == 2.0
    assert skill["clue_rank"]["lines"] == 6 and skill["guess_rank"]["lines"] == 6
    assert 1 <= skill["clue_rank"]["value"] <= 3 and 0 <= skill["opening_foul_rate"]["value"] <= 1
    again = measure_skill(player, player, words, config, clues, lines_per_word=2)
    for metric, entry in compare_skill(skill, again).items():
        assert entry["value"] == pytest.approx(0.0, abs=1e-9), metric


def test_opening_lines_are_what_the_games_say_first(player):
    config = PlayConfig.of(max_turns=2, temperature=1.0, max_new_tokens=8, seed=11)
    words = ["coffee", "river", "garden", "window"]
    episodes = play_games(player, player, words, config, show_progress=False)
    assert config.opening_lines(player, words) == [e["history"][0]["content"] for e in episodes]


def test_the_skill_reads_the_opening_lines_of_the_games_it_played(player, tmp_path):
    """Where the evaluation games were just played, the skill metrics take their opening lines (seed by seed)
    instead of generating them again: the same lines, so the same metrics."""
    from dataclasses import replace

    from spag.evaluate.games import evaluate_models, opening_lines_played
    from spag.game.taboo.skill import clue_set, measure_skill

    config = PlayConfig.of(max_turns=2, temperature=1.0, max_new_tokens=8, seed=5)
    words = ["coffee", "river", "garden"]
    evaluate_models(player, player, words, config, episodes_out=tmp_path / "games", seeds=2)
    played = opening_lines_played(tmp_path / "games", config.game, words, seeds=2)
    assert played == [
        line for s in range(2) for line in replace(config, seed=5 + s).opening_lines(player, words)
    ]
    clues = clue_set(player, words, config, per_word=1)
    fresh = measure_skill(player, player, words, config, clues, lines_per_word=2)
    read = measure_skill(player, player, words, config, clues, lines_per_word=2, openings=played)
    assert read == fresh
    # a game missing, a word asked twice: nothing to read, the caller generates the lines
    assert opening_lines_played(tmp_path / "games", config.game, [*words, "window"], seeds=2) is None
    assert opening_lines_played(tmp_path / "games", config.game, ["river", "river"], seeds=2) is None
    assert opening_lines_played(tmp_path / "none", config.game, words) is None
    with pytest.raises(ValueError, match="2 opening lines for 6"):
        measure_skill(player, player, words, config, clues, lines_per_word=2, openings=played[:2])


def test_a_baseline_wrapping_a_model_takes_that_models_guess_rank(player):
    """The guess rank reads the model's own guess distribution, which no strategy changes: a baseline that wraps
    the imitation model takes the imitation model's (the pipeline's metrics/imitation/skill.json) when it was
    measured on the same words and clues, and measures its own otherwise."""
    import json

    from spag.game.taboo.baselines import FILTER
    from spag.game.taboo.skill import clue_set, measure_skill
    from spag.game.taboo.strategies import WithStrategies

    config = PlayConfig.of(max_turns=2, temperature=1.0, max_new_tokens=8, seed=2)
    words = ["coffee", "river", "garden"]
    clues = clue_set(player, words, config, per_word=1)
    plain = json.loads(
        json.dumps(measure_skill(player, player, words, config, clues))
    )  # as the stage reads it
    wrapped = WithStrategies(player, FILTER, name="filtered")
    fresh = measure_skill(wrapped, player, words, config, clues)
    taken = measure_skill(wrapped, player, words, config, clues, model_skill=plain)
    assert taken["guess_rank"] == fresh["guess_rank"] == plain["guess_rank"]
    assert taken["clue_rank"] == fresh["clue_rank"]  # its own opening lines, strategies included
    altered = json.loads(json.dumps(plain))
    altered["per_word"]["guess_rank"]["coffee"][0] += 1.0
    assert (
        measure_skill(wrapped, player, words, config, clues, model_skill=altered)["per_word"]["guess_rank"][
            "coffee"
        ][0]
        == plain["per_word"]["guess_rank"]["coffee"][0] + 1.0
    )  # taken as it is
    other = measure_skill(
        wrapped, player, words[:2], config, clues, model_skill=plain
    )  # other words: measured
    assert other["guess_rank"] == measure_skill(wrapped, player, words[:2], config, clues)["guess_rank"]


# ------------------------------------------------------------------------- baselines with strategies


@pytest.fixture(scope="module")
def sayer(tmp_path_factory):
    """Greedy, it answers every prompt with a line that says "coffee"."""
    path = make_scripted_checkpoint(tmp_path_factory.mktemp("sayer") / "m", "Drink coffee.")
    return load_player(str(path), "hf", device="cpu", dtype="float32")


def test_word_filter_and_resampling_apply_to_the_baseline_side_only(sayer):
    from spag.game.taboo.card import TabooStrategies
    from spag.game.taboo.strategies import WithStrategies

    config = PlayConfig.of(max_turns=1, temperature=0.0, max_new_tokens=8)
    filtered = WithStrategies(sayer, TabooStrategies(foul_retries=2, word_filter=True), name="sayer-filter")
    [as_attacker] = play_games(filtered, sayer, ["coffee"], config, show_progress=False)
    [as_defender] = play_games(sayer, filtered, ["coffee"], config, show_progress=False)
    assert as_attacker["history"][0]["content"] == "Drink ___."
    assert as_attacker["outcome"] != ATTACKER_BREAKS_RULES and as_attacker["attacker_model"] == "sayer-filter"
    # the plain model on the other side keeps its own ways: it says the word as attacker
    assert as_defender["outcome"] == ATTACKER_BREAKS_RULES and as_defender["defender_model"] == "sayer-filter"


def test_the_baselines_are_the_games_and_the_settings_check_their_names():
    from spag.config import validate
    from spag.evaluate.games import strongest
    from spag.game.taboo.baselines import BASELINES
    from spag.runtime.errors import ParamsError

    assert Taboo.skill.baselines == tuple(BASELINES)
    with pytest.raises(ParamsError, match="evaluate.baselines: 'oracle' is not a baseline of taboo"):
        validate({"evaluate": {"baselines": ["oracle"]}})
    results = {
        name: {"bootstrap": {"score": {"value": v}}}
        for name, v in (("imitation-filter", 0.6), ("base-teacher", 0.6), ("imitation-resample", 0.5))
    }
    assert strongest(results) == "base-teacher"  # equal scores: alphabetical order decides
    assert strongest({}) is None


# ------------------------------------------------------------------------------------------ tournament


def test_elo_intervals_resample_words_not_games():
    from spag.evaluate.tournament import Match, elo_ratings

    # Each word is won by the same side in all its 20 games: ten words of evidence, not 200 games.
    clustered = [Match(0, 1, 1.0 if w % 2 else 0.0, w) for w in range(10) for _ in range(20)]
    spread = [Match(0, 1, float(i % 2), w) for w in range(10) for i in range(20)]
    wide = elo_ratings(clustered, 2, resamples=300)
    tight = elo_ratings(spread, 2, resamples=300)
    assert (wide["high"][0] - wide["low"][0]) > 3 * (tight["high"][0] - tight["low"][0])


def test_a_tournament_of_checkpoints_and_baselines(tmp_path, sayer):
    from spag.evaluate.tournament import run_tournament

    model = str(make_scripted_checkpoint(tmp_path / "sayer", "Drink coffee."))
    config = PlayConfig.of(max_turns=1, temperature=0.0, max_new_tokens=8)
    metrics = run_tournament(
        [model],
        ["coffee", "lemon"],
        config,
        names=["imitation"],
        baselines=["imitation-filter"],
        baseline_models={"imitation": model},
        filtered=["imitation"],
        episodes_out=tmp_path / "games",
        show_progress=False,
        resamples=50,
        device="cpu",
        dtype="float32",
    )
    assert (
        metrics["models"] == ["imitation", "imitation-filter", "imitation+filter"] and metrics["words"] == 2
    )
    assert metrics["score"]["imitation-filter"]["imitation+filter"] == 0.5  # the same player under two names
    # Both always say "Drink coffee." On coffee, the filtered attacker says "Drink ___." and the plain
    # defender then says the word (1 point to the baseline), the plain attacker fouls (1 point); on lemon
    # nobody says anything that counts: two ties. 3 points of 4.
    assert metrics["score"]["imitation-filter"]["imitation"] == 0.75
    cell = metrics["score_interval"]["imitation-filter"]["imitation"]
    assert (cell["value"], cell["games"], cell["words"]) == (0.75, 4, 2)
    assert 0.5 <= cell["low"] <= cell["high"] <= 1.0


def test_tournament_command_takes_labels_and_baselines(tmp_path):
    import json

    from spag.testing import run_cli

    model = str(make_scripted_checkpoint(tmp_path / "sayer", "Drink coffee."))
    words = tmp_path / "words.txt"
    words.write_text("coffee\nlemon\nCoffee\n")  # a word listed again is played once
    out = tmp_path / "t.json"
    unknown = run_cli(
        "tournament",
        "--models",
        f"imitation={model}",
        "--baselines",
        "imitation-best",
        "--imitation",
        model,
        "--words",
        str(words),
        "-o",
        str(out),
    )
    assert unknown.code == 2 and "unknown baseline 'imitation-best'" in unknown.stderr
    missing = run_cli(
        "tournament",
        "--models",
        f"imitation={model}",
        "--baselines",
        "base-teacher",
        "--words",
        str(words),
        "-o",
        str(out),
    )
    assert missing.code == 2 and "needs --base" in missing.stderr
    done = run_cli(
        "tournament",
        "--models",
        f"imitation={model}",
        "--baselines",
        "imitation-filter",
        "--imitation",
        model,
        "--words",
        str(words),
        "-o",
        str(out),
        "--temperature",
        "0",
        "--max-turns",
        "1",
        "--max-new-tokens",
        "8",
        "--resamples",
        "20",
    )
    assert done.code == 0, done.stderr
    metrics = json.loads(out.read_text())
    assert metrics["models"] == ["imitation", "imitation-filter"] and metrics["games"] == 4
    assert "4 games on 2 words" in done.stderr and "line 3 ('Coffee', as line 1)" in done.stderr
    twice = run_cli(
        "tournament",
        "--models",
        f"imitation={model}",
        "--baselines",
        "imitation-filter",
        "--baselines",
        "imitation-filter",
        "--imitation",
        model,
        "--words",
        str(words),
        "-o",
        str(out),
    )
    assert (
        twice.code == 2
        and "--baselines" in twice.stderr
        and "imitation-filter is listed twice" in twice.stderr
    )
