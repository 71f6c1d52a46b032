"""A bandit test of the trainer (scripts/bandit.py on a tiny random model): two replies to one prompt, one
rewarded +1 and one -1, trained with offline-po at the pipeline's learning rate (spag.learning_rate, 2e-5)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from spag.testing import load_script as load_script_file
from spag.testing import make_tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent
LEARNING_RATE = yaml.safe_load((ROOT / "params.yaml").read_text())["spag"]["learning_rate"]
# Two replies the tiny model gives about equally often (p of the first over the pair: 0.487)
REWARDED, OTHER = "[call]", "[bet]"


def load_script():
    return load_script_file(ROOT / "scripts" / "bandit.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("bandit") / "tiny")


def test_probability_moves_to_the_rewarded_reply_within_ten_steps(tiny, tmp_path):
    bandit = load_script()
    assert LEARNING_RATE == 2e-5
    points = bandit.bandit(tiny, tmp_path / "run", REWARDED, OTHER, learning_rate=LEARNING_RATE, steps=10)
    p = [point["p"] for point in points]
    assert 0.45 < p[0] < 0.55
    # the first step runs at rate 0 (the warm-up's first step), every later one moves toward the rewarded reply
    assert p[1] == pytest.approx(p[0], abs=1e-6)
    assert all(later > earlier for earlier, later in itertools.pairwise(p[1:]))
    # measured: 0.487 -> 0.557 (log-odds -0.05 -> +0.23) in 10 steps, the cosine schedule down to 0 at the end
    assert p[10] - p[0] >= 0.05


def test_a_rewarded_reply_at_one_in_a_hundred_thousand_barely_moves(tiny, tmp_path):
    """The saturated case, the never-played fold of the earlier Kuhn poker experiment: imitation (here 27
    SFT steps on the other reply) leaves the rewarded reply at p of about 1e-5. The same 10 steps then move
    its log-odds about as far as in the balanced case (AdamW's step does not shrink with the gradient), but a
    probability moves by p (1 - p) times its log-odds: from 2.5e-5 by a few millionths, against 0.07 from
    0.49. In self-play it is worse: a reply at 1e-5 is sampled about once in 100,000 replies, so in an epoch
    of a few hundred it gets no row at all, and no reward can reach it."""
    bandit = load_script()
    from spag.harness import training

    sft = tmp_path / "sft.jsonl"
    sft.write_text(
        "".join(
            json.dumps({"prompt": bandit.PROMPT, "completion": OTHER, "kind": "game"}) + "\n"
            for _ in range(4)
        )
    )
    saturated = tmp_path / "saturated"
    training.train(
        "sft",
        str(tiny),
        sft,
        saturated,
        learning_rate=3e-3,
        max_steps=27,
        batch_size=4,
        show_progress=False,
        live=False,
        seed=0,
    )
    points = bandit.bandit(
        saturated, tmp_path / "run", REWARDED, OTHER, learning_rate=LEARNING_RATE, steps=10
    )
    start, end = points[0], points[-1]
    assert 1e-6 < start["p"] < 1e-4  # measured: 2.5e-5
    assert end["log_odds"] - start["log_odds"] > 0.05  # measured: +0.15, half the balanced case's +0.28
    assert 0 < end["p"] - start["p"] < 1e-5  # measured: +4e-6


def test_the_script_reports_every_step_and_writes_its_figures(tiny, tmp_path, capsys):
    bandit = load_script()
    output = tmp_path / "bandit.json"
    assert (
        bandit.main(
            [
                "--model",
                str(tiny),
                "--learning-rate",
                "2e-5",
                "--steps",
                "2",
                "--out",
                str(tmp_path / "runs"),
                "-o",
                str(output),
                "--other",
                OTHER,
            ]
        )
        == 0
    )
    figures = json.loads(output.read_text())
    assert [p["step"] for p in figures["points"]["2e-05"]] == [0, 1, 2] and figures["rewarded"] == REWARDED
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[bandit]")]
    assert lines[0].startswith("[bandit] lr 2e-05: log-odds by step ") and lines[-1].startswith(
        "[bandit] 1 learning"
    )
    assert not (
        tmp_path / "runs" / "lr-2e-05" / "model" / "checkpoints" / "checkpoint-1"
    ).exists()  # read, deleted


def test_the_card_bandit_reads_each_cards_call_at_every_step(tiny, tmp_path):
    bandit = load_script()
    prompts = bandit.card_prompts()
    assert (
        prompts["K"].replace("Your card: K", "Your card: J") == prompts["J"]
    )  # the card is all that differs
    points = bandit.card_bandit(tiny, tmp_path / "cards", learning_rate=LEARNING_RATE, steps=3)
    assert [p["step"] for p in points] == [0, 1, 2, 3]
    assert all(p["gap"] == pytest.approx(p["call_K"] - p["call_J"]) for p in points)
    assert points[-1]["gap"] > points[0]["gap"]  # the rows push the two cards apart


def test_the_card_last_format_says_the_card_again_at_the_prompts_end():
    bandit = load_script()
    plain, last = bandit.card_prompts(), bandit.card_prompts(card_last=True)
    for card in ("K", "J"):
        assert last[card] == plain[card] + f"\nYou hold {card}: [call] or [fold]?"
    assert last["K"].replace("Your card: K", "Your card: J").replace("hold K", "hold J") == last["J"]


def test_the_overlap_names_twelve_information_sets_and_a_symmetric_cosine(tiny, tmp_path, capsys):
    bandit = load_script()
    prompts = bandit.information_set_prompts()
    assert len(prompts) == 12  # four situations, three cards each
    assert sorted({bandit._history(name) for name in prompts}) == [
        "first check,bet",
        "first opening",
        "second bet",
        "second check",
    ]
    assert prompts["second K bet"][0].replace("Your card: K", "Your card: J") == prompts["second J bet"][0]
    output = tmp_path / "overlap.json"
    assert bandit.main(["--model", str(tiny), "--overlap", "-o", str(output)]) == 0
    figures = json.loads(output.read_text())
    cosine = figures["cosine"]
    assert len(figures["information_sets"]) == 12
    for i, j in itertools.product(range(12), repeat=2):
        assert cosine[i][j] == pytest.approx(cosine[j][i])
        assert -1 - 1e-9 <= cosine[i][j] <= 1 + 1e-9
    assert all(cosine[i][i] == pytest.approx(1.0) for i in range(12))
    assert not all(cosine[i][j] == pytest.approx(1.0) for i in range(12) for j in range(i))  # sets differ
    assert capsys.readouterr().out.splitlines()[-1].startswith("[bandit] gradient cosine")


def test_the_overlap_with_say_card_scores_each_action_after_the_cards_opening(tiny, tmp_path):
    bandit = load_script()
    plain, named = bandit.information_set_prompts(), bandit.information_set_prompts(say_card=True)
    assert list(plain) == list(named)
    for name, (prompt, opening, aggressive, passive) in named.items():
        card = name.split()[1]
        assert opening == f"My card: {card}." and plain[name][1] == ""
        assert (aggressive, passive) == plain[name][2:]
        assert prompt != plain[name][0] and f'reply with "{opening}"' in prompt
    figures = {}
    for form, extra in (("plain", []), ("say_card", ["--say-card"])):
        output = tmp_path / f"{form}.json"
        assert bandit.main(["--model", str(tiny), "--overlap", *extra, "-o", str(output)]) == 0
        figures[form] = json.loads(output.read_text())
    assert (figures["plain"]["say_card"], figures["say_card"]["say_card"]) == (False, True)
    cosine = figures["say_card"]["cosine"]
    assert all(cosine[i][i] == pytest.approx(1.0) for i in range(12))
    # other prompts and an opening before the action: other gradients, so other cosines
    assert cosine[0][1] != pytest.approx(figures["plain"]["cosine"][0][1], abs=1e-6)


def test_the_bandit_replaces_only_its_own_earlier_output(tiny, tmp_path, capsys):
    bandit = load_script()
    runs = tmp_path / "runs"
    notes = runs / "lr-2e-05" / "notes.txt"  # a folder of someone else's files where a run would write
    notes.parent.mkdir(parents=True)
    notes.write_text("mine")
    argv = [
        "--model",
        str(tiny),
        "--learning-rate",
        "2e-5",
        "--steps",
        "1",
        "--out",
        str(runs),
        "--other",
        OTHER,
    ]
    assert bandit.main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "lr-2e-05" in error[0] and "refusing" in error[0]
    assert notes.read_text() == "mine"
    notes.unlink()
    assert bandit.main(argv) == 0 and bandit.main(argv) == 0  # a second run replaces the first's output
    assert (runs / "lr-2e-05" / "rows.jsonl").read_text().count("\n") == 4
