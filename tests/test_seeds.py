"""`spag seeds`: effects over training seeds from the metrics files of finished pipeline runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from spag.evaluate.seeds import pool_runs
from spag.runtime.errors import DataError

WORDS = ["apple", "river", "castle", "violin"]


def make_run(root, scores, baselines, clue=None, imitation_clue=None, words=WORDS, epoch="2"):
    """A run's metrics as the pipeline writes them: per-word [points, games] and [sum, count]."""
    metrics = root / "metrics"
    (metrics / "epochs" / epoch).mkdir(parents=True)
    (metrics / "baselines").mkdir()
    (metrics / "imitation").mkdir()
    per_word = {w: [2 * s, 2] for w, s in zip(words, scores)}
    (metrics / "epochs" / epoch / "games.json").write_text(
        json.dumps({"vs_imitation": {"per_word": per_word}})
    )
    for name, values in baselines.items():
        (metrics / "baselines" / f"{name}.json").write_text(
            json.dumps({"games": {"per_word": {w: [2 * s, 2] for w, s in zip(words, values)}}})
        )
    if clue is not None:

        def skill(values):
            return {
                "per_word": {
                    m: {w: [v, 1] for w, v in zip(words, values)}
                    for m in ("clue_rank", "guess_rank", "opening_foul_rate")
                }
            }

        (metrics / "epochs" / epoch / "skill.json").write_text(json.dumps(skill(clue)))
        (metrics / "imitation" / "skill.json").write_text(json.dumps(skill(imitation_clue)))
    return root


def test_pooled_effects_are_means_over_runs_and_words(tmp_path):
    a = make_run(
        tmp_path / "a",
        [1.0, 0.5, 0.5, 1.0],
        {"filter": [0.5] * 4, "teacher": [1.0, 0.5, 0.5, 0.5]},
        clue=[1, 2, 3, 4],
        imitation_clue=[2, 2, 2, 2],
    )
    b = make_run(
        tmp_path / "b",
        [0.5, 0.5, 0.5, 0.5],
        {"filter": [0.5] * 4, "teacher": [1.0, 1.0, 0.5, 0.5]},
        clue=[3, 3, 3, 3],
        imitation_clue=[2, 2, 2, 2],
    )
    effects = pool_runs([a, b])["effects"]
    score = effects["score_vs_imitation"]
    assert score["value"] == pytest.approx(0.625) and score["per_run"] == pytest.approx([0.75, 0.5])
    assert score["low"] <= score["value"] <= score["high"] and score["runs"] == 2
    strongest = effects["minus_strongest_baseline"]  # teacher: mean 0.6875 over both runs, filter 0.5
    assert strongest["baseline"] == "teacher"
    assert strongest["per_run"] == pytest.approx([0.75 - 0.625, 0.5 - 0.75])
    assert effects["clue_rank"]["per_run"] == pytest.approx([0.5, 1.0])


def test_two_arms_are_paired_seed_by_seed(tmp_path):
    a = [make_run(tmp_path / f"a{i}", [1.0, 1.0, 0.5, 0.5], {}) for i in range(2)]
    b = [make_run(tmp_path / f"b{i}", [0.5, 0.5, 0.5, 0.5], {}) for i in range(2)]
    result = pool_runs(a, b)
    difference = result["against"]["a_minus_b"]["score_vs_imitation"]
    assert (
        difference["value"] == pytest.approx(0.25)
        and 0 <= difference["low"] < 0.25 < difference["high"] <= 0.5
    )
    with pytest.raises(DataError, match="runs to pair"):
        pool_runs(a, b[:1])


def test_runs_on_other_words_are_refused_with_one_line(tmp_path):
    a = make_run(tmp_path / "a", [1.0] * 4, {})
    b = make_run(tmp_path / "b", [1.0] * 4, {}, words=["apple", "river", "castle", "piano"])
    missing = tmp_path / "unfinished"
    missing.mkdir()
    for runs, message in (([a, b], "other words"), ([a, missing], "no evaluated epoch")):
        done = subprocess.run(
            [sys.executable, "-m", "spag.cli", "seeds", *map(str, runs)], capture_output=True, text=True
        )
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_command_writes_its_result_and_a_summary(tmp_path):
    runs = [make_run(tmp_path / f"r{i}", [1.0, 0.5, 0.5, 0.5], {"filter": [0.5] * 4}) for i in range(2)]
    out = tmp_path / "seeds.json"
    done = subprocess.run(
        [sys.executable, "-m", "spag.cli", "seeds", *map(str, runs), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["effects"]["score_vs_imitation"]["value"] == pytest.approx(0.625)
    assert "[spag seeds] 2 runs: score vs imitation 0.625" in done.stderr + done.stdout


def one_line_error(*args):
    """`spag seeds ARGS` in this process: its one error line (exit 2 asserted)."""
    from spag.testing import run_cli

    result = run_cli("seeds", *map(str, args))
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert "Traceback" not in result.stderr
    return line


def test_a_run_given_twice_is_refused_not_counted_as_another_seed(tmp_path):
    a = make_run(tmp_path / "a", [1.0, 0.5, 0.5, 1.0], {})
    b = make_run(tmp_path / "b", [0.5] * 4, {})
    (tmp_path / "link").symlink_to(a, target_is_directory=True)
    line = one_line_error(a, a, a)
    assert f"{a}: given twice" in line and "one seed" in line
    # another spelling of the same folder, a link to it, and the same run in both arms
    for runs in ([a, f"{a}/../a"], [a, tmp_path / "link"]):
        with pytest.raises(DataError, match=re.escape(f"given twice (the same folder as {a})")):
            pool_runs(runs)
    for runs, against, twice in (([a], [b, b], b), ([a, b], [a, b], a)):
        with pytest.raises(DataError, match=re.escape(f"{twice}: given twice")):
            pool_runs(runs, against)


BROKEN_GAMES = {  # what games.json holds -> what the error names
    "entry_of_one_number": ({"vs_imitation": {"per_word": {"apple": [1]}}}, "per_word['apple'] = [1]"),
    "entry_with_text": (
        {"vs_imitation": {"per_word": {"apple": ["x", 2]}}},
        "per_word['apple'] = [\"x\", 2]",
    ),
    "per_word_a_list": ({"vs_imitation": {"per_word": [["apple", 1, 2]]}}, "per_word is list"),
    "top_level_a_list": ([{"per_word": {}}], "expected a JSON object, got list"),
    "nan_count": ({"vs_imitation": {"per_word": {"apple": [1, float("nan")]}}}, "not a finite number"),
    "more_wins_than_games": ({"vs_imitation": {"per_word": {"apple": [5, 2]}}}, "5 points in 2 games"),
}


@pytest.mark.parametrize("content, named", BROKEN_GAMES.values(), ids=BROKEN_GAMES.keys())
def test_a_malformed_games_file_is_one_line_naming_it(tmp_path, content, named):
    run = make_run(tmp_path / "run", [1.0] * 4, {})
    games = run / "metrics" / "epochs" / "2" / "games.json"
    games.write_text(json.dumps(content))
    line = one_line_error(run)
    assert line.startswith(f"error: {games}: ") and named in line, line


def test_an_epoch_folder_without_a_number_and_a_missing_run_are_named(tmp_path):
    run = make_run(tmp_path / "run", [1.0] * 4, {})
    final = run / "metrics" / "epochs" / "final"
    final.mkdir()
    (final / "games.json").write_text((run / "metrics" / "epochs" / "2" / "games.json").read_text())
    assert f"{final}: not an epoch number" in one_line_error(run)
    assert pool_runs([run], epoch="2")["effects"]["score_vs_imitation"]["value"] == 1.0  # named: fine
    assert f"{tmp_path / 'nowhere'}: no such folder" in one_line_error(tmp_path / "nowhere")
