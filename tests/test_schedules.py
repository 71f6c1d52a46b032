"""Learning-rate schedules: DeepSpeed's WarmupDecayLR by hand (as DeepSpeed 0.13.1, which the original pinned,
and later versions ran it), and in a real (tiny) training run."""

import math

import pytest

from spag.harness import training
from spag.testing import make_tiny_checkpoint
from spag.train.job import TrainConfig
from spag.train.schedules import step_factor, warmup_decay_factor


def test_warmup_decay_by_hand():
    # W = 4 warm-up steps of T = 10: log(s + 1) / log 4, then (10 − s) / 6 down to 0
    assert [warmup_decay_factor(s, 4, 10) for s in range(4)] == pytest.approx(
        [0.0, math.log(2) / math.log(4), math.log(3) / math.log(4), 1.0]
    )
    assert [warmup_decay_factor(s, 4, 10) for s in range(4, 12)] == pytest.approx(
        [1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0.0, 0.0]
    )


def test_warmup_decay_without_warmup_is_a_straight_line():
    assert [warmup_decay_factor(s, 0, 4) for s in range(5)] == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    assert [warmup_decay_factor(s, 1, 4) for s in range(5)] == pytest.approx([1.0, 1.0, 2 / 3, 1 / 3, 0.0])


def test_the_first_steps_are_where_the_deepspeed_versions_differ():
    # DeepSpeed steps its scheduler after each optimiser step: step k >= 2 runs at iteration k − 2. Before the
    # first step, 0.13.1 left the optimiser's own rate (the full one), 0.15.3 and later set the minimum (0).
    W, T = 4, 10
    later = [0.0, 0.0, math.log(2) / math.log(4), math.log(3) / math.log(4), 1.0, 1.0, 5 / 6]
    assert [step_factor("warmup_decay", done, W, T) for done in range(7)] == pytest.approx(later)
    assert [step_factor("warmup_decay_ds013", done, W, T) for done in range(7)] == pytest.approx(
        [1.0, *later[1:]]
    )


def test_unknown_scheduler_is_rejected():
    with pytest.raises(ValueError, match="lr_scheduler"):
        TrainConfig(lr_scheduler="cosine_restarts").resolved("sft")


@pytest.mark.parametrize("schedule", ["warmup_decay", "warmup_decay_ds013"])
@pytest.mark.slow
def test_a_training_run_follows_the_deepspeed_schedule(tmp_path, schedule):
    import json

    tiny = make_tiny_checkpoint(tmp_path / "tiny")
    data = tmp_path / "rows.jsonl"
    rows = [{"prompt": f"Say {w}.", "completion": w, "kind": "sft"} for w in ("one", "two", "three", "four")]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lr, steps = 1e-3, 10
    training.train(
        "sft",
        tiny,
        data,
        tmp_path / "out",
        learning_rate=lr,
        max_steps=steps,
        batch_size=2,
        grad_accum=1,
        warmup_ratio=0.3,
        lr_scheduler=schedule,
        logging_steps=1,
        live_dir=tmp_path / "live",
        show_progress=False,
        seed=0,
    )
    lines = (tmp_path / "live" / "plots" / "metrics" / "train" / "learning_rate.tsv").read_text().splitlines()
    logged = {int(step): float(value) for step, value in (line.split("\t") for line in lines[1:])}
    # optimiser step k runs at the schedule's factor after k − 1 steps; W = ceil(0.3 · 10) = 3
    expected = {k: lr * step_factor(schedule, k - 1, 3, steps) for k in logged}
    assert sorted(logged) == list(range(1, steps + 1))
    assert logged and logged == pytest.approx(expected, rel=1e-6, abs=1e-12)
