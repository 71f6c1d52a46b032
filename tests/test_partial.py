"""Resume under `dvc repro`: a stage's partial work lives beside its declared output (which DVC deletes
before running the stage) and is moved into place only when the stage finishes."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from spag.game.episodes import read_episodes
from spag.harness.folders import output_kind
from spag.harness.partial import partial_path, resumable_output
from spag.runtime.errors import OutputRefused
from spag.testing import make_tiny_checkpoint

WORDS = ["apple", "river", "coffee", "garden", "window", "lemon", "planet", "bridge"] * 2

# What stages/play.py does, with the model, output and words from the command line.
STAGE = textwrap.dedent("""
    import sys
    from spag.harness.partial import resumable_output
    from spag.harness.folders import PLAY_KIND
    from spag.play.engine import PlayConfig, PlayStats, run_games

    model, output, words = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    stats = PlayStats()
    with resumable_output(output, PLAY_KIND) as work:
        run_games(model, model, words, PlayConfig.of(max_turns=2, max_new_tokens=4, batch_size=2), output=work,
                  resume=True, device="cpu", show_progress=False, stats=stats)
    print(f"kept {stats.resumed}, played {stats.games}")
""")


def test_work_is_moved_into_place_only_when_the_block_finishes(tmp_path):
    out = tmp_path / "episodes"
    with pytest.raises(RuntimeError), resumable_output(out, "play") as work:
        work.mkdir()
        (work / "shard-00000.parquet").write_text("finished games")
        raise RuntimeError("killed")
    assert not out.exists() and (partial_path(out) / "shard-00000.parquet").exists()
    with resumable_output(out, "play") as again:
        assert again == partial_path(out)
    assert (out / "shard-00000.parquet").read_text() == "finished games" and output_kind(out) == "play"
    assert not partial_path(out).exists()


def test_someone_elses_folder_in_the_way_is_refused(tmp_path):
    out = tmp_path / "episodes"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputRefused), resumable_output(out, "play") as work:
        work.mkdir()
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_a_killed_play_stage_continues_from_its_finished_games(tmp_path):
    model = make_tiny_checkpoint(tmp_path / "model")
    script = tmp_path / "stage.py"
    script.write_text(STAGE)
    out = tmp_path / "data" / "episodes"
    stage = [sys.executable, str(script), str(model), str(out), ",".join(WORDS)]
    killed = subprocess.Popen(stage, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = partial_path(out)
    deadline = time.monotonic() + 240
    while not list(work.glob("*.parquet")) and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    kept = read_episodes(work)
    assert 0 < len(kept) < len(WORDS) and not out.exists()

    # `dvc repro` deletes the declared output (here: there is none yet) and runs the stage again.
    again = subprocess.run(stage, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert f"resuming from {work}" in again.stdout
    whole = tmp_path / "whole"
    assert subprocess.run([*stage[:3], str(whole), stage[4]], capture_output=True).returncode == 0
    by_index = lambda episodes: sorted(episodes, key=lambda e: e["word_index"])
    assert by_index(read_episodes(out)) == by_index(read_episodes(whole))
    assert f"kept {len(kept)}, played {len(WORDS) - len(kept)}" in again.stdout  # none played twice
    assert not work.exists()
