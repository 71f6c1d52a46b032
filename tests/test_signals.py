"""SIGTERM and SIGINT: finished games are written, the exit code is non-zero, and a resume gives exactly
the episodes of an uninterrupted run. A killed `spag train` resumes from its last complete checkpoint.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spag.game.episodes import read_episodes
from spag.play.engine import PlayConfig, play_games
from spag.players import Reply
from spag.runtime.signals import Terminated, graceful_termination
from spag.testing import make_tiny_checkpoint, run_cli

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["apple", "river", "coffee", "garden", "window", "lemon", "planet", "bridge"]


class SignallingPlayer:
    """Answers at once; sends ``signum`` to its own process on call number ``at`` (as a scheduler would)."""

    name = "signalling"

    def __init__(self, at=None, signum=signal.SIGTERM):
        self.at, self.signum, self.calls = at, signum, 0

    def generate(self, prompts, **kw):
        self.calls += 1
        if self.calls == self.at:
            os.kill(os.getpid(), self.signum)
        # A game on "apple" ends at once; the others run to the last turn.
        return [
            Reply("I know the word! It is apple" if "apple" in p.split("target word")[-1][:40] else "hmm", 2)
            for p in prompts
        ]


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler (KeyboardInterrupt), as in an interactive run: a shell starts background
    jobs with SIGINT ignored, and Python then leaves it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def config():
    return PlayConfig.of(
        max_turns=3, batch_size=len(WORDS) + 1
    )  # no shard before the end: only a flush writes


@pytest.mark.parametrize("signum, raised", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_flushes_the_finished_games_and_resume_completes_the_run(
    tmp_path, signum, raised, python_sigint
):
    out = tmp_path / "episodes"
    with graceful_termination(), pytest.raises(raised):
        play_games(
            SignallingPlayer(at=3, signum=signum),
            SignallingPlayer(),
            WORDS,
            config(),
            output=out,
            show_progress=False,
        )
    flushed = read_episodes(out)
    assert [e["target_word"] for e in flushed] == [
        "apple"
    ]  # finished before the signal, written by the flush
    resumed = play_games(
        SignallingPlayer(), SignallingPlayer(), WORDS, config(), output=out, resume=True, show_progress=False
    )
    uninterrupted = play_games(SignallingPlayer(), SignallingPlayer(), WORDS, config(), show_progress=False)
    assert resumed == uninterrupted


# ------------------------------------------------------------------------- real processes, tiny model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


def spag_process(*args):
    return subprocess.Popen(
        [sys.executable, "-m", "spag.cli", *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, process, seconds=240):
    deadline = time.monotonic() + seconds
    while not condition() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be interrupted"


@pytest.mark.slow
def test_spag_play_terminated_resumes_to_the_uninterrupted_episodes(tiny, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("".join(f"{w}{i}\n" for i in range(3) for w in WORDS))  # a repeat would be played once
    common = [
        "--attacker",
        tiny,
        "--defender",
        tiny,
        "--words",
        words,
        "--max-turns",
        "2",
        "--max-new-tokens",
        "4",
        "--batch-size",
        "2",
        "--device",
        "cpu",
        "--no-progress",
    ]
    out = tmp_path / "killed"
    process = spag_process("play", *common, "-o", out)
    wait_for(lambda: any(out.glob("*.parquet")), process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "terminated" in stderr and "Traceback" not in stderr
    assert 0 < len(read_episodes(out)) < 3 * len(WORDS)

    assert run_cli("play", *common, "-o", out, "--resume").code == 0
    assert run_cli("play", *common, "-o", tmp_path / "whole").code == 0
    by_index = lambda episodes: sorted(episodes, key=lambda e: e["word_index"])
    assert by_index(read_episodes(out)) == by_index(read_episodes(tmp_path / "whole"))


@pytest.mark.slow
def test_spag_evaluate_terminated_keeps_its_games_and_resumes(tiny, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("".join(f"{w}{i}\n" for i in range(2) for w in WORDS))  # a repeat would be played once
    common = [
        "--model",
        tiny,
        "--opponent",
        tiny,
        "--words",
        words,
        "--max-turns",
        "2",
        "--max-new-tokens",
        "4",
        "--batch-size",
        "2",
    ]
    out = tmp_path / "killed"
    process = spag_process("evaluate", *common, "-o", tmp_path / "m.json", "--episodes-out", out)
    wait_for(lambda: (out / "as_attacker.parquet").exists(), process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert not (tmp_path / "m.json").exists()  # no metrics from half a run

    assert (
        run_cli("evaluate", *common, "-o", tmp_path / "m.json", "--episodes-out", out, "--resume").code == 0
    )
    assert (
        run_cli("evaluate", *common, "-o", tmp_path / "w.json", "--episodes-out", tmp_path / "whole").code
        == 0
    )
    for role in ("as_attacker", "as_defender"):
        assert read_episodes(out / f"{role}.parquet") == read_episodes(tmp_path / "whole" / f"{role}.parquet")
    resumed, whole = (json.loads((tmp_path / n).read_text()) for n in ("m.json", "w.json"))
    assert resumed == whole


@pytest.mark.slow
def test_spag_train_killed_resumes_from_its_checkpoint_to_the_same_step_count(tiny, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": f"Question {i}?",
                    "completion": f"Answer {i}.",
                    "reward": None,
                    "weight": 1.0,
                    "role": None,
                    "kind": "sft",
                    "target_word": None,
                    "turn": None,
                    "episode": None,
                }
            )
            + "\n"
            for i in range(8)
        )
    )
    out = tmp_path / "model"
    args = [
        "train",
        "--method",
        "sft",
        "--model",
        tiny,
        "--data",
        rows,
        "-o",
        out,
        "--max-steps",
        "40",
        "--batch-size",
        "2",
        "--grad-accum",
        "1",
        "--save-steps",
        "4",
        "--no-live",
        "--device",
        "cpu",
    ]
    process = spag_process(*args)
    wait_for(lambda: (out / "checkpoints" / "checkpoint-4" / "trainer_state.json").exists(), process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "training_summary.json").exists()

    refused = run_cli(*args)  # a fresh run over the killed one's checkpoints needs --resume or --overwrite
    assert refused.code == 2 and "--resume" in refused.stderr
    resumed = run_cli(*args, "--resume")
    assert resumed.code == 0, resumed.stderr
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["steps"] == 40 and "checkpoint-" in summary["resumed_from"]


STAGE = """
import os, signal, sys, time
from spag.pipeline.run import run_stage

def words(settings, layout):  # a stage at work when the scheduler's SIGTERM comes
    (layout.root / "started").write_text("")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)

run_stage(words, sys.argv[1], [])
"""


def test_a_pipeline_stage_stopped_by_sigterm_says_so_in_one_line(tmp_path):
    """A stage script died silently on SIGTERM (or with a traceback inside a resumable output),
    where the `spag` command says one line and exits 143."""
    (tmp_path / "params.yaml").write_bytes((ROOT / "params.yaml").read_bytes())
    done = subprocess.run(
        [sys.executable, "-c", STAGE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (tmp_path / "started").exists(), done.stderr
    assert done.returncode == 143, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "error: terminated (SIGTERM); finished work was kept"
    assert "Traceback" not in done.stderr
