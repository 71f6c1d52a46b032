"""Nothing is deleted that the tool did not write: output directories carry a marker and are checked.

Each failure found in review has a test named after it: `spag train -o DIR`, `spag base-model -o DIR` and
`--checkpoint-dir` deleted a user's files without a word.
"""

import json

import pytest

from spag.harness.claims import claim_output_dir, prepare_output_dir
from spag.harness.folders import MARKER, output_kind
from spag.runtime.errors import OutputRefused
from spag.testing import make_tiny_checkpoint, run_cli

ROW = {
    "prompt": "Name a yellow fruit.",
    "completion": "A banana.",
    "reward": None,
    "weight": 1.0,
    "role": None,
    "kind": "sft",
    "target_word": None,
    "turn": None,
    "episode": None,
}
FAST = [
    "--max-steps",
    "1",
    "--batch-size",
    "1",
    "--grad-accum",
    "1",
    "--no-live",
    "--device",
    "cpu",
    "--save-steps",
    "1",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROW) + "\n", encoding="utf-8")
    return path


def users_folder(path):
    path.mkdir(parents=True)
    (path / "thesis.tex").write_text("three years of work")
    return path


def assert_refused(result, path):
    assert result.code == 2, result.stderr
    lines = result.error_lines()
    assert len(lines) == 1 and str(path) in lines[0], lines
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------- the rules


def test_claim_accepts_new_empty_and_own_outputs_only(tmp_path):
    claim_output_dir(tmp_path / "new", "train")
    (tmp_path / "empty").mkdir()
    claim_output_dir(tmp_path / "empty", "train")
    own = prepare_output_dir(tmp_path / "own", "train")
    (own / "model.safetensors").write_text("weights")
    with pytest.raises(OutputRefused, match="--overwrite"):
        claim_output_dir(own, "train")
    claim_output_dir(own, "train", overwrite=True)
    claim_output_dir(own, "train", resume=True)
    with pytest.raises(OutputRefused, match="spag train"):
        claim_output_dir(own, "base-model", overwrite=True)
    foreign = users_folder(tmp_path / "foreign")
    with pytest.raises(OutputRefused, match="not written by"):
        claim_output_dir(foreign, "train", overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputRefused, match="not a directory"):
        claim_output_dir(tmp_path / "file", "play", overwrite=True)


def test_overwrite_replaces_only_a_previous_output_of_the_same_kind(tmp_path):
    from spag.runtime.atomic import write_text_atomic

    own = prepare_output_dir(tmp_path / "eval", "evaluate")
    write_text_atomic(own / "as_attacker.parquet", "old")  # spag's, recorded in the folder's manifest
    (own / "NOTES.md").write_text("the user's")
    prepare_output_dir(own, "evaluate", overwrite=True)
    assert sorted(p.name for p in own.iterdir()) == [MARKER, "NOTES.md"]
    assert output_kind(own) == "evaluate"


# ------------------------------------------------------------ what a command may replace, and what not


def test_train_output_dir_with_user_files_is_refused_not_deleted(tiny, rows, tmp_path):
    target = users_folder(tmp_path / "mine")
    result = run_cli("train", "--method", "sft", "--model", tiny, "--data", rows, "-o", target, *FAST)
    assert_refused(result, target)
    assert sorted(p.name for p in target.iterdir()) == ["thesis.tex"]
    result = run_cli(
        "train", "--method", "sft", "--model", tiny, "--data", rows, "-o", target, "--overwrite", *FAST
    )
    assert_refused(result, target)
    assert (target / "thesis.tex").read_text() == "three years of work"


def test_train_checkpoint_dir_with_user_files_is_refused_not_deleted(tiny, rows, tmp_path):
    checkpoints = users_folder(tmp_path / "scratch")
    out = tmp_path / "out"
    result = run_cli(
        "train",
        "--method",
        "sft",
        "--model",
        tiny,
        "--data",
        rows,
        "-o",
        out,
        "--checkpoint-dir",
        checkpoints,
        *FAST,
    )
    assert_refused(result, checkpoints)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["thesis.tex"]
    assert not out.exists()


def test_train_overwrite_replaces_its_own_previous_output(tiny, rows, tmp_path):
    out = tmp_path / "out"
    assert run_cli("train", "--method", "sft", "--model", tiny, "--data", rows, "-o", out, *FAST).code == 0
    assert output_kind(out) == "train" and (out / "training_summary.json").is_file()
    again = run_cli("train", "--method", "sft", "--model", tiny, "--data", rows, "-o", out, *FAST)
    assert_refused(again, out)
    assert "--overwrite" in again.stderr
    replaced = run_cli(
        "train", "--method", "sft", "--model", tiny, "--data", rows, "-o", out, "--overwrite", *FAST
    )
    assert replaced.code == 0, replaced.stderr
    assert (out / "training_summary.json").is_file()


def test_train_refuses_another_commands_output(tiny, rows, tmp_path):
    # The tiny checkpoint is a `spag checkpoint` output, not a `spag train` one: --overwrite cannot take it.
    result = run_cli(
        "train", "--method", "sft", "--model", tiny, "--data", rows, "-o", tiny, "--overwrite", *FAST
    )
    assert_refused(result, tiny)
    assert (tiny / "config.json").is_file()


def test_base_model_output_dir_with_user_files_is_refused_not_deleted(tmp_path):
    target = users_folder(tmp_path / "mine")
    # Refused before the wheel is even looked for: no network, no download.
    result = run_cli("base-model", "-o", target, "--overwrite", "--wheel", tmp_path / "missing.whl")
    assert_refused(result, target)
    assert sorted(p.name for p in target.iterdir()) == ["thesis.tex"]


@pytest.mark.slow
def test_play_output_dir_with_user_files_is_refused(tiny, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("apple\nriver\n")
    target = users_folder(tmp_path / "mine")
    args = [
        "play",
        "--attacker",
        tiny,
        "--defender",
        tiny,
        "--words",
        words,
        "--max-turns",
        "1",
        "--max-new-tokens",
        "3",
        "--device",
        "cpu",
        "--no-progress",
        "-o",
    ]
    assert_refused(run_cli(*args, target, "--overwrite"), target)
    assert sorted(p.name for p in target.iterdir()) == ["thesis.tex"]

    out = tmp_path / "episodes"
    assert run_cli(*args, out).code == 0
    assert output_kind(out) == "play"
    assert_refused(run_cli(*args, out), out)
    again = run_cli(*args, out, "--overwrite")
    assert again.code == 0, again.stderr
    assert sorted(p.name for p in out.glob("*.parquet")) == ["shard-00000.parquet"]


def test_evaluate_episodes_folder_with_user_files_is_refused(tiny, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("apple\n")
    target = users_folder(tmp_path / "mine")
    result = run_cli(
        "evaluate",
        "--model",
        tiny,
        "--opponent",
        tiny,
        "--words",
        words,
        "-o",
        tmp_path / "m.json",
        "--episodes-out",
        target,
        "--overwrite",
        "--max-turns",
        "1",
        "--max-new-tokens",
        "3",
    )
    assert_refused(result, target)
    assert sorted(p.name for p in target.iterdir()) == ["thesis.tex"]
    assert not (tmp_path / "m.json").exists()


def test_a_claimed_folder_says_whose_it_is_before_its_first_file_lands(tmp_path, monkeypatch):
    """A command killed right after its first write into a claimed folder (before any bookkeeping that
    follows the write) leaves a folder marked as its output: a resume accepts it, where an unmarked folder
    with a file in it would be refused as someone else's."""
    from spag.harness.claims import release_held
    from spag.harness.rule import RULE
    from spag.runtime.atomic import write_text_atomic

    folder = claim_output_dir(tmp_path / "episodes", "play")

    def killed(target):
        raise KeyboardInterrupt  # the process ends between the file's arrival and what follows it

    monkeypatch.setattr(RULE, "written", killed)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(folder / "shard-0.jsonl", "{}\n")
    monkeypatch.undo()
    release_held()
    assert (folder / "shard-0.jsonl").exists() and output_kind(folder) == "play"
    assert claim_output_dir(folder, "play", resume=True) == folder
    release_held()


def test_a_commands_claims_end_with_it(tmp_path):
    """A claimed file is checked at every write while the command lasts (here: a new file only, so a second
    write is refused); once the command ends (release_held), the path is no claim of anyone's."""
    from spag.harness.claims import claim_files, release_held
    from spag.runtime.atomic import write_text_atomic
    from spag.runtime.errors import OutputExists

    path = tmp_path / "out.txt"
    claim_files({"-o": path})
    write_text_atomic(path, "first")
    with pytest.raises(OutputExists):
        write_text_atomic(path, "second")
    release_held()
    write_text_atomic(path, "third")  # a library write, no claim: it lands
    assert path.read_text() == "third"


def test_a_later_process_of_a_launched_run_claims_the_folder_the_first_one_checked(tmp_path, monkeypatch):
    """Under a launcher every process claims the run's folders, and the first may have written its first
    files before another one starts: only the first process refuses a previous output (asks for
    --overwrite); a later one claims the folder the first one checked. A folder of someone else's files is
    refused by every process."""
    from spag.config import TrainConfig
    from spag.harness.claims import release_held
    from spag.harness.training import training_outputs
    from spag.runtime.atomic import write_text_atomic

    out = claim_output_dir(tmp_path / "out", "train")
    write_text_atomic(out / "training_args.json", "{}")  # the first process's first file
    release_held()
    config = TrainConfig(live=False)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(OutputRefused, match="--overwrite"), training_outputs(out, config):
        pass
    release_held()
    monkeypatch.setenv("RANK", "1")
    with training_outputs(out, config) as claimed:
        assert claimed == out
    release_held()
    assert (out / "training_args.json").read_text() == "{}"
    foreign = users_folder(tmp_path / "foreign")
    with pytest.raises(OutputRefused, match="not written by"), training_outputs(foreign, config):
        pass
    release_held()
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]
