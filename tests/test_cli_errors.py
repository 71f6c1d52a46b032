"""Bad input to every subcommand: exit code 2, one line naming the file or option, no traceback, and no
output left behind. One table covers every `spag` subcommand; the failures found in review also have
tests named after them.
"""

import json
import os
import shutil
from pathlib import Path

import pytest

from spag.cli import COMMAND_MODULES, app
from spag.harness.manifest import MANIFEST
from spag.testing import make_tiny_checkpoint, run_cli

EPISODE = {
    "target_word": "apple",
    "max_turns": 5,
    "history": [
        {"role": "attacker", "content": "a fruit"},
        {"role": "defender", "content": "I know the word! It is apple"},
    ],
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def files(tmp_path, tiny):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "words.txt").write_text("apple\nriver\n")
    (tmp_path / "episodes.jsonl").write_text(json.dumps(EPISODE) + "\n")
    (tmp_path / "not_a_model").mkdir()
    (tmp_path / "not_a_model" / "notes.txt").write_text("hello")
    (tmp_path / "tiny_too").symlink_to(tiny, target_is_directory=True)  # a second model for tournament
    return {
        "tiny": str(tiny),
        "tiny_too": str(tmp_path / "tiny_too"),
        "tmp": str(tmp_path),
        "missing": str(tmp_path / "missing.txt"),
        "empty": str(tmp_path / "empty.txt"),
        "binary": str(tmp_path / "binary.bin"),
        "words": str(tmp_path / "words.txt"),
        "episodes": str(tmp_path / "episodes.jsonl"),
        "not_a_model": str(tmp_path / "not_a_model"),
        "no_model": str(tmp_path / "no" / "model"),
        "out": str(tmp_path / "out"),
    }


PAPER = Path(__file__).resolve().parent.parent / "configs" / "paper.yaml"  # the original's prompts: no model
PLAY = "play --attacker {tiny} --defender {tiny} --words {words} -o {out} --no-progress"
EVALUATE = "evaluate --model {tiny} --opponent {tiny} --words {words} -o {out}"
TRAIN = "train --method sft --model {tiny} --data {episodes} -o {out} --no-live"
TOURNAMENT = "tournament --models {tiny} --models {tiny_too} --words {words} -o {out}"

# (subcommand arguments, what the one error line must name)
CASES = {
    "words_top_zero": ("words -o {out} --top 0", "--top"),
    "words_eval_fraction_1.5": ("words -o {out} --eval-fraction 1.5", "--eval-fraction"),
    "judge_missing_file": ("judge {missing} -o {out}", "{missing}"),
    "judge_empty_file": ("judge {empty} -o {out}", "{empty}"),
    "judge_binary_file": ("judge {binary} -o {out}", "{binary}"),
    "judge_folder_without_episodes": ("judge {not_a_model} -o {out}", "{not_a_model}"),
    "base_model_missing_wheel": ("base-model -o {out} --wheel {missing}", "{missing}"),
    "play_words_missing_file": (PLAY.replace("{words}", "{missing}"), "{missing}"),
    "play_empty_word_list": (PLAY.replace("{words}", "{empty}"), "{empty}"),
    "play_binary_word_list": (PLAY.replace("{words}", "{binary}"), "{binary}"),
    "play_max_turns_zero": (PLAY + " --max-turns 0", "--max-turns"),
    "play_batch_size_zero": (PLAY + " --batch-size 0", "--batch-size"),
    "play_max_new_tokens_zero": (PLAY + " --max-new-tokens 0", "--max-new-tokens"),
    "play_limit_zero": (PLAY + " --limit 0", "--limit"),
    "play_negative_temperature": (PLAY + " --temperature -1", "--temperature"),
    "play_unknown_model_path": (PLAY.replace("--attacker {tiny}", "--attacker {no_model}"), "--attacker"),
    "play_folder_that_is_no_model": (
        PLAY.replace("--defender {tiny}", "--defender {not_a_model}"),
        "--defender",
    ),
    "play_unknown_backend": (PLAY + " --backend nope", "--backend"),
    "prompt_missing_params": ("prompt {episodes} --params {missing} -o {out}", "{missing}"),
    "prompt_missing_file": (f"prompt {{missing}} --params {PAPER} -o {{out}}", "{missing}"),
    "prompt_binary_file": (f"prompt {{binary}} --params {PAPER} -o {{out}}", "{binary}"),
    "reward_missing_file": ("reward {missing} -o {out}.parquet", "{missing}"),
    "reward_empty_file": ("reward {empty} -o {out}.parquet", "{empty}"),
    "reward_binary_file": ("reward {binary} -o {out}.parquet", "{binary}"),
    "reward_decay_zero": ("reward {episodes} -o {out} --decay 0", "--decay"),
    "reward_output_without_suffix": ("reward {episodes} -o {out}", "{out}: the output must end in .parquet"),
    "imitation_data_missing_file": ("imitation-data {missing} -o {out}.parquet", "{missing}"),
    "imitation_data_empty_file": ("imitation-data {empty} -o {out}.parquet", "{empty}"),
    "train_missing_data": (TRAIN.replace("{episodes}", "{missing}"), "{missing}"),
    "train_empty_data": (TRAIN.replace("{episodes}", "{empty}"), "{empty}"),
    "train_binary_data": (TRAIN.replace("{episodes}", "{binary}"), "{binary}"),
    "train_batch_size_zero": (TRAIN + " --batch-size 0", "--batch-size"),
    "train_max_length_one": (TRAIN + " --max-length 1", "--max-length"),
    "train_unknown_method": (TRAIN.replace("sft", "nope", 1), "--method"),
    "train_unknown_model_path": (TRAIN.replace("--model {tiny}", "--model {no_model}"), "--model"),
    "train_missing_deepspeed_config": (TRAIN + " --deepspeed {missing}", "--deepspeed"),
    "evaluate_words_missing_file": (EVALUATE.replace("{words}", "{missing}"), "{missing}"),
    "evaluate_empty_word_list": (EVALUATE.replace("{words}", "{empty}"), "{empty}"),
    "evaluate_max_turns_zero": (EVALUATE + " --max-turns 0", "--max-turns"),
    "evaluate_batch_size_zero": (EVALUATE + " --batch-size 0", "--batch-size"),
    "evaluate_unknown_model_path": (EVALUATE.replace("--model {tiny}", "--model {no_model}"), "--model"),
    "evaluate_unknown_backend": (EVALUATE + " --backend nope", "--backend"),
    "benchmark_unknown_model_path": ("benchmark --model {no_model} -o {out}", "--model"),
    "benchmark_limit_zero": ("benchmark --model {tiny} -o {out} --limit 0", "--limit"),
    "benchmark_batch_size_zero": ("benchmark --model {tiny} -o {out} --batch-size 0", "--batch-size"),
    "benchmark_data_unknown_task": (
        "benchmark-data -o {out} --tasks nosuchtask",
        "--tasks: unknown lm-eval task",
    ),
    "benchmark_data_hub_only_task": (
        "benchmark-data -o {out} --tasks logiqa2",
        "--tasks: the items of logiqa2 are on the Hugging Face hub only",
    ),
    "benchmark_data_no_task": ("benchmark-data -o {out} --tasks ,", "--tasks: no task named"),
    "compare_missing_file": ("compare {missing} {missing} -o {out}", "{missing}"),
    "compare_binary_file": ("compare {binary} {binary} -o {out}", "{binary}"),
    "tournament_words_missing_file": (TOURNAMENT.replace("{words}", "{missing}"), "{missing}"),
    "tournament_max_turns_zero": (TOURNAMENT + " --max-turns 0", "--max-turns"),
    "tournament_one_model": ("tournament --models {tiny} --words {words} -o {out}", "--models"),
    "tournament_same_model_twice": (
        TOURNAMENT.replace("{tiny_too}", "{tiny}"),
        "the same model is listed twice",
    ),
    "tournament_unknown_model_path": (
        TOURNAMENT.replace("--models {tiny} --models", "--models {no_model} --models"),
        "--models",
    ),
    "strategy_unknown_model_path": ("strategy {no_model} -o {out}", "MODEL"),
    "strategy_samples_zero": ("strategy {tiny} -o {out} --samples 0", "--samples"),
    "strategy_another_game": ("strategy {tiny} -o {out} --game taboo", "--game"),
    "strategy_missing_params": ("strategy {tiny} -o {out} --params {missing}", "{missing}"),
    "seeds_missing_run": ("seeds {missing} -o {out}", "{missing}"),
    "analyze_no_episode_files": ("analyze {missing}", "{missing}"),
    "analyze_unknown_format": ("analyze {episodes} --format nope", "--format"),
    "config_missing_file": ("config check {missing}", "{missing}"),
    "config_binary_file": ("config show {binary}", "{binary}"),
}


def check_bad_input(files, tmp_path, args: str, names: str):
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = run_cli(*[part.format(**files) for part in args.split()])
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.error_lines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and names.format(**files) in lines[0], lines[0]
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before, "output left behind"
    return lines[0]


@pytest.mark.parametrize("args, names", CASES.values(), ids=CASES.keys())
def test_bad_input(files, tmp_path, args, names):
    check_bad_input(files, tmp_path, args, names)


def test_the_table_covers_every_subcommand():
    commands = {c.name or c.callback.__name__ for c in app.registered_commands}
    commands |= {group.name for group in app.registered_groups}
    covered = {args.split()[0] for args, _ in CASES.values()}
    assert len(COMMAND_MODULES) == 11 and commands == covered


# ----------------------------------------------------- a command's own output folder and bad input


def test_play_with_a_missing_words_file_is_one_line_not_a_traceback(files, tmp_path):
    line = check_bad_input(files, tmp_path, *CASES["play_words_missing_file"])
    assert "no such file" in line


def test_play_with_an_empty_word_list_exits_2(files, tmp_path):
    assert "no words" in check_bad_input(files, tmp_path, *CASES["play_empty_word_list"])


def test_reward_on_an_empty_file_exits_2(files, tmp_path):
    assert "no episodes" in check_bad_input(files, tmp_path, *CASES["reward_empty_file"])


def test_words_top_zero_is_refused_not_743_words(files, tmp_path):
    check_bad_input(files, tmp_path, *CASES["words_top_zero"])


def test_judge_on_a_binary_file_is_one_line_not_a_traceback(files, tmp_path):
    assert "not UTF-8" in check_bad_input(files, tmp_path, *CASES["judge_binary_file"])


# ----------------------------------------------------------------- files spag did not write are kept


@pytest.fixture
def user_parquet(tmp_path):
    """A Parquet file of the user's own (not episodes), which no spag command may replace."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "user.parquet"
    pq.write_table(pa.table({"name": ["a", "b"], "value": [1, 2]}), path)
    return path


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_play_never_replaces_a_parquet_file_spag_did_not_write(files, user_parquet, overwrite):
    before = user_parquet.read_bytes()
    result = run_cli(
        *PLAY.replace("{out}", str(user_parquet)).format(**files).split(),
        "--limit",
        "1",
        "--max-new-tokens",
        "2",
        *overwrite,
    )
    assert result.code == 2
    (line,) = result.error_lines()
    assert (
        str(user_parquet) in line
        and "holds a Parquet table of other columns (name, value), not episodes spag wrote" in line
    )
    assert user_parquet.read_bytes() == before


@pytest.mark.parametrize(
    "command",
    [PLAY.replace("{out}", "{tmp}/notes.parquet"), EVALUATE + " --episodes-out {tmp}/notes.parquet"],
)
def test_a_file_that_is_not_parquet_is_refused_saying_so(files, tmp_path, command):
    notes = tmp_path / "notes.parquet"
    notes.write_text("my notes\n")
    line = check_bad_input(files, tmp_path, command + " --overwrite", str(notes))
    assert "is not a Parquet file, so not episodes spag wrote" in line
    assert notes.read_text() == "my notes\n"


def test_play_overwrites_its_own_episode_file_only_when_asked(files, tmp_path):
    out = tmp_path / "mine.parquet"
    args = [
        *PLAY.replace("{out}", str(out)).format(**files).split(),
        "--limit",
        "1",
        "--max-new-tokens",
        "2",
        "--max-turns",
        "1",
    ]
    assert run_cli(*args).code == 0
    again = run_cli(*args)
    assert again.code == 2 and "already holds episodes" in again.error_lines()[-1]
    assert run_cli(*args, "--overwrite").code == 0


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
@pytest.mark.parametrize("command", [EVALUATE, TOURNAMENT])
def test_episodes_out_never_replaces_a_file_spag_did_not_write(files, user_parquet, command, overwrite):
    before = user_parquet.read_bytes()
    result = run_cli(
        *command.format(**files).split(), "--episodes-out", user_parquet, *overwrite, "--max-new-tokens", "2"
    )
    assert result.code == 2
    (line,) = result.error_lines()
    assert (
        str(user_parquet) in line
        and "holds a Parquet table of other columns (name, value), not episodes spag wrote" in line
    )
    assert user_parquet.read_bytes() == before
    assert not Path(files["out"]).exists()  # refused before any game was played


# ------------------------------------------------------------------------------- odd but real inputs


LISTS = [
    'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
    *[f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)],
]
MAPPINGS = [
    "m0: &m0 {a: lol, b: lol, c: lol, d: lol, e: lol, f: lol, g: lol, h: lol, i: lol}",
    *[f"m{i}: &m{i} {{{', '.join(f'k{j}: *m{i - 1}' for j in range(9))}}}" for i in range(1, 9)],
]


@pytest.mark.parametrize(
    "bomb, says",
    [
        ([*LISTS, f"seed: [{', '.join(['*l8'] * 9)}]"], "seed: expected an integer"),
        ([*LISTS, "play:", "  temperature: *l8"], "play.temperature: expected a number"),
        ([*MAPPINGS, "seed: *m8"], "seed: expected an integer"),
    ],
)
def test_a_yaml_alias_bomb_under_a_known_key_is_one_short_line(tmp_path, bomb, says):
    """Nine levels of nine aliases: a few lines of YAML whose full repr would be billions of characters.
    Run as its own process with a time limit: a regression fails here instead of hanging the suite."""
    import subprocess
    import sys

    params = tmp_path / "params.yaml"
    params.write_text("\n".join(bomb) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "spag.cli", "config", "check", str(params)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    # the value shown cut short; then each of the anchors' nine unknown keys, the file named once
    assert line.startswith(f"error: {params}: {says}") and len(line) - len(str(params)) < 600
    assert line.count(str(params)) == 1


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_infinite_or_nan_numbers_are_refused_in_a_params_file(tmp_path, value):
    params = tmp_path / "params.yaml"
    params.write_text(f"play:\n  temperature: {value}\n")
    result = run_cli("config", "check", params)
    assert result.code == 2 and "play.temperature" in result.error_lines()[-1]


def test_temperature_inf_on_the_command_line_is_refused(files):
    result = run_cli(*PLAY.format(**files).split(), "--temperature", "inf")
    assert result.code == 2
    (line,) = result.error_lines()
    assert line.startswith("error: --temperature:") and "finite" in line


def test_a_word_list_with_a_byte_order_mark_and_crlf_reads_clean_words(tmp_path):
    from spag.game.words import read_words

    path = tmp_path / "words.txt"
    path.write_bytes(b"\xef\xbb\xbfapple\r\nriver\r\n")
    assert read_words(path) == ["apple", "river"]


def test_a_control_character_in_a_target_word_names_its_line(tmp_path):
    path = tmp_path / "words.txt"
    path.write_bytes(b"apple\nriv\x00er\n")
    result = run_cli("words", "-o", tmp_path / "out", "--source", path)
    assert result.code == 2
    (line,) = result.error_lines()
    assert str(path) in line and "line 2" in line and "control character" in line


@pytest.mark.parametrize("target", ["\ufeffapple", "app\x00le", "apple\r"])
@pytest.mark.parametrize("command", ["judge", "reward", "imitation-data"])
def test_a_control_character_in_an_episodes_target_word_names_its_record(tmp_path, command, target):
    """A word list's BOM or NUL copied into episodes: the judge would never match the word as said."""
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(EPISODE) + "\n" + json.dumps({**EPISODE, "target_word": target}) + "\n")
    strict = [] if command == "judge" else ["--strict"]
    result = run_cli(command, path, "-o", tmp_path / "out.jsonl", *strict)
    assert result.code == 2, result.stderr
    line = result.error_lines()[0]
    assert (
        str(path) in line
        and "record 1" in line
        and "'target_word' holds an invisible control character" in line
    )
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("command", ["reward", "imitation-data", "judge"])
def test_an_output_that_is_the_input_is_refused_and_the_input_kept(files, command):
    before = Path(files["episodes"]).read_bytes()
    result = run_cli(command, files["episodes"], "-o", files["episodes"])
    assert result.code == 2
    (line,) = result.error_lines()
    assert "-o is the same file as EPISODES" in line
    assert Path(files["episodes"]).read_bytes() == before


BAD_OUTPUTS = {
    "play_export_json_onto_words": (
        PLAY + " --export-json {words}",
        "--export-json is the same file as --words",
    ),
    "play_export_json_onto_output": (
        PLAY.replace("{out}", "{out}.parquet") + " --export-json {out}.parquet",
        "--export-json is the same file as -o",
    ),
    "evaluate_metrics_onto_words": (EVALUATE.replace("{out}", "{words}"), "-o is the same file as --words"),
    "evaluate_episodes_onto_metrics": (
        EVALUATE + " --episodes-out {out}",
        "--episodes-out is the same file as -o",
    ),
    "tournament_heatmap_onto_metrics": (TOURNAMENT + " --heatmap {out}", "--heatmap is the same file as -o"),
    "tournament_heatmap_a_folder": (
        TOURNAMENT + " --heatmap {not_a_model}",
        "--heatmap names the file to write",
    ),
    "play_export_json_a_folder": (
        PLAY + " --export-json {not_a_model}",
        "--export-json names the file to write",
    ),
    "benchmark_samples_a_folder": (
        "benchmark --model {tiny} -o {out} --samples-out {not_a_model} --limit 1",
        "--samples-out names the file to write",
    ),
    "words_output_a_folder": ("words -o {not_a_model} --source {words}", "-o names the file to write"),
    "words_eval_out_under_a_file": (
        "words -o {out} --source {words} --eval-out {empty}/held.txt",
        "{empty} is a file, not a folder (--eval-out)",
    ),
    "judge_output_a_folder": ("judge {episodes} -o {not_a_model}", "-o names the file to write"),
    "reward_output_a_folder": ("reward {episodes} -o {not_a_model}", "-o names the file to write"),
    "imitation_data_output_under_a_file": (
        "imitation-data {episodes} -o {empty}/rows.parquet",
        "{empty} is a file, not a folder (-o)",
    ),
    "compare_output_a_folder": ("compare {episodes} {words} -o {not_a_model}", "-o names the file to write"),
    "benchmark_samples_onto_metrics": (
        "benchmark --model {tiny} -o {out} --samples-out {out}",
        "--samples-out is the same file as -o",
    ),
    "compare_output_onto_a": ("compare {episodes} {words} -o {episodes}", "-o is the same file as A"),
    "train_output_onto_data": (TRAIN.replace("{out}", "{episodes}"), "-o is the same file as --data"),
    "train_output_onto_model": (TRAIN.replace("{out}", "{tiny}"), "-o is the same file as --model"),
    "train_live_dir_onto_output": (
        TRAIN.replace("--no-live", "--live-dir {out}"),
        "--live-dir is the same file as -o",
    ),
    "train_live_dir_onto_checkpoints": (
        TRAIN.replace("--no-live", "--live-dir {out}/checkpoints"),
        "--live-dir is the same file as the checkpoints (-o/checkpoints)",
    ),
    "base_model_output_onto_wheel": (
        "base-model -o {words} --wheel {words}",
        "-o is the same file as --wheel",
    ),
}


@pytest.mark.parametrize("args, says", BAD_OUTPUTS.values(), ids=BAD_OUTPUTS.keys())
def test_an_output_path_that_cannot_be_used_is_refused_before_any_work(files, tmp_path, args, says):
    def contents():
        return {
            p: p.read_bytes()
            for folder in (tmp_path, Path(files["tiny"]))
            for p in folder.rglob("*")
            if p.is_file()
        }

    before = contents()
    check_bad_input(files, tmp_path, args, says)
    assert contents() == before


@pytest.mark.parametrize("command", ["reward", "imitation-data", "judge"])
@pytest.mark.parametrize("output", ["shard-0.parquet", "rows.parquet", "sub/rows.jsonl"])
def test_an_output_inside_a_folder_of_episode_shards_is_refused(tmp_path, command, output):
    """reward SHARDS -o SHARDS/shard-0.parquet would replace a shard with rows (a new file there would be
    read as a shard next time)."""
    from spag.game.episodes import write_episodes

    shards = tmp_path / "episodes"
    write_episodes([EPISODE], shards / "shard-0.parquet")
    before = (shards / "shard-0.parquet").read_bytes()
    result = run_cli(command, shards, "-o", shards / output)
    assert result.code == 2
    (line,) = result.error_lines()
    assert (
        line
        == f"error: {shards / output}: -o is inside the folder EPISODES (the input); choose a path outside it"
    )
    assert sorted(p.name for p in shards.rglob("*") if p.name != MANIFEST) == ["shard-0.parquet"]
    assert (shards / "shard-0.parquet").read_bytes() == before


def test_words_outputs_must_differ_from_the_source_and_each_other(files, tmp_path):
    source = Path(files["words"])
    before = source.read_bytes()
    into_source = run_cli("words", "-o", tmp_path / "all.txt", "--source", source, "--eval-out", source)
    assert (
        into_source.code == 2 and "--eval-out is the same file as --source" in into_source.error_lines()[-1]
    )
    assert source.read_bytes() == before
    same = tmp_path / "same.txt"
    three = run_cli("words", "-o", same, "--source", source, "--train-out", same, "--eval-out", same)
    assert three.code == 2 and "--train-out is the same file as -o" in three.error_lines()[-1]
    assert not same.exists()


@pytest.mark.parametrize("device, says", [("gpu0", "'gpu0' is not a device"), ("cuda", "no CUDA GPU")])
@pytest.mark.parametrize("command", [PLAY, "benchmark --model {tiny} -o {out} --limit 1"])
def test_a_device_this_machine_lacks_is_one_line(files, tmp_path, command, device, says):
    import torch

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    line = check_bad_input(files, tmp_path, f"{command} --device {device}", "--device")
    assert line.startswith("error: --device") and says in line


@pytest.mark.parametrize(
    "command",
    [
        EVALUATE + " --max-new-tokens 2",
        TOURNAMENT + " --max-new-tokens 2",
        "benchmark --model {tiny} -o {out} --limit 1",
    ],
)
def test_an_unwritable_metrics_path_is_refused_before_any_game(files, tmp_path, command):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    result = run_cli(*command.replace("{out}", str(folder)).format(**files).split())
    assert result.code == 2
    (line,) = result.error_lines()
    assert str(folder) in line and "is a directory" in line
    assert not any(folder.iterdir())


@pytest.mark.parametrize("max_turns", ["2.7", "true", "Infinity", "1e400", "NaN"])
@pytest.mark.parametrize("command", ["judge", "reward", "imitation-data"])
def test_max_turns_must_be_a_whole_number(tmp_path, command, max_turns):
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(EPISODE)[:-1].replace('"max_turns": 5', f'"max_turns": {max_turns}') + "}\n")
    assert f'"max_turns": {max_turns}' in path.read_text()
    strict = [] if command == "judge" else ["--strict"]  # judge stops at the first bad record anyway
    result = run_cli(command, path, "-o", tmp_path / "out.jsonl", *strict)
    assert result.code == 2, result.stderr
    lines = result.error_lines()  # reward/imitation-data: the record's line, then "nothing written"
    assert str(path) in lines[0] and "'max_turns' is not a whole number" in lines[0]
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("command", [["judge"], ["reward", "--strict"], ["imitation-data", "--strict"]])
@pytest.mark.parametrize(
    "history, says",
    [
        (EPISODE["history"][::-1], "history[0] is the defender's"),  # the defender speaks first
        (EPISODE["history"][:1] * 2, "history[1] is the attacker's"),  # the attacker twice in a row
    ],
)
def test_a_history_out_of_turn_order_names_its_record(tmp_path, command, history, says):
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(EPISODE) + "\n" + json.dumps({**EPISODE, "history": history}) + "\n")
    result = run_cli(command[0], path, "-o", tmp_path / "out.jsonl", *command[1:])
    assert result.code == 2
    line = result.error_lines()[0]  # reward/imitation-data: then "nothing written"
    assert str(path) in line and "record 1" in line and says in line
    assert not (tmp_path / "out.jsonl").exists()


def test_a_section_given_twice_is_named_not_dropped(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("play:\n  words: 3\nseed: 1\nplay:\n  words: 5\n")
    result = run_cli("config", "check", params)
    assert result.code == 2
    (line,) = result.error_lines()
    assert str(params) in line and "line 4" in line and "'play' is given twice" in line


@pytest.mark.parametrize("entry, shown", [("c++", "+"), ("r&d", "&"), ("a/b", "/")])
def test_a_target_word_the_judge_cannot_match_names_its_line(tmp_path, entry, shown):
    path = tmp_path / "words.txt"
    path.write_text(f"apple\nt-shirt\no'clock\n{entry}\n")
    result = run_cli("words", "-o", tmp_path / "out", "--source", path)
    assert result.code == 2
    (line,) = result.error_lines()
    assert str(path) in line and "line 4" in line and f"holds {shown}" in line
    assert not (tmp_path / "out").exists()


def test_a_lone_surrogate_names_its_file_and_record(files, tmp_path):
    episodes = tmp_path / "episodes.jsonl"
    good = '{"target_word": "apple", "max_turns": 1, "history": [{"role": "attacker", "content": "hi"}]}\n'
    episodes.write_text(good + good.replace('"hi"', '"h\\ud800i"'))
    result = run_cli("reward", episodes, "-o", tmp_path / "rows.parquet")
    assert result.code == 2
    (line,) = result.error_lines()
    assert str(episodes) in line and "record 1" in line and "lone surrogate" in line
    assert not (tmp_path / "rows.parquet").exists()


@pytest.fixture
def own_code_model(files, tmp_path):
    """A copy of the tiny model whose config names an architecture only its own code defines."""
    model = tmp_path / "custom"
    shutil.copytree(files["tiny"], model)
    config = json.loads((model / "config.json").read_text())
    config.update(model_type="my_own_llama", auto_map={"AutoModelForCausalLM": "modeling_mine.MyModel"})
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_train_on_a_model_with_its_own_code_asks_for_trust(files, tmp_path, own_code_model):
    model = own_code_model
    result = run_cli(
        "train", "--method", "sft", "--model", model, "--data", files["episodes"], "-o", tmp_path / "out"
    )
    assert result.code == 2
    (line,) = result.error_lines()
    assert str(model / "config.json") in line and "--trust-remote-code" in line and "'my_own_llama'" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command, option, remedy",
    [
        (
            PLAY.replace("--attacker {tiny}", "--attacker {tmp}/custom"),
            "--attacker",
            "pass --trust-remote-code",
        ),
        (
            EVALUATE.replace("--opponent {tiny}", "--opponent {tmp}/custom"),
            "--opponent",
            "this command does not run",
        ),
        (TOURNAMENT.replace("{tiny_too}", "{tmp}/custom"), "--models", "this command does not run"),
        ("benchmark --model {tmp}/custom -o {out} --limit 1", "--model", "this command does not run"),
    ],
)
def test_every_command_refuses_a_model_with_its_own_code_before_loading_it(
    files, tmp_path, own_code_model, command, option, remedy
):
    line = check_bad_input(files, tmp_path, command, f"(given to {option})")
    assert (
        str(own_code_model / "config.json") in line
        and "'my_own_llama' is defined by the model's own code" in line
    )
    assert remedy in line


def test_a_library_error_of_several_lines_is_told_in_one(files, tmp_path, own_code_model):
    """--trust-remote-code on a model whose code is missing: transformers' multi-line message, one line."""
    result = run_cli(
        *PLAY.replace("--attacker {tiny}", f"--attacker {own_code_model}").format(**files).split(),
        "--trust-remote-code",
    )
    assert result.code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "my_own_llama" in errors[0]
    assert result.stderr.rstrip().endswith(errors[0])


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_files_spag_writes_get_the_mode_the_umask_gives(files, tmp_path, umask):
    """Atomic writes go through a temporary file (mkstemp makes it 0600): the finished file has the mode
    any new file gets here."""
    previous = os.umask(umask)
    try:
        words = run_cli(
            "words",
            "-o",
            tmp_path / "all.txt",
            "--source",
            files["words"],
            "--eval-out",
            tmp_path / "held.txt",
        )
        rows = run_cli("reward", files["episodes"], "-o", tmp_path / "rows.parquet")
        judged = run_cli("judge", files["episodes"], "-o", tmp_path / "judged.jsonl")
    finally:
        os.umask(previous)
    assert words.code == rows.code == judged.code == 0, words.stderr + rows.stderr + judged.stderr
    for name in ("all.txt", "held.txt", "rows.parquet", "judged.jsonl"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


@pytest.mark.parametrize("flag", [[], ["--overwrite"], ["--resume"]])
def test_a_live_dir_of_the_users_files_is_refused_whatever_the_flag(files, tmp_path, flag):
    """--live-dir . in a project: dvclive would delete and replace its dvc.yaml, params.yaml, metrics.json,
    report.html and plots/."""
    rows = tmp_path / "rows.jsonl"
    assert run_cli("reward", files["episodes"], "-o", rows).code == 0
    project = tmp_path / "project"
    (project / "plots" / "metrics").mkdir(parents=True)
    for name in ("dvc.yaml", "params.yaml", "metrics.json", "report.html", "plots/metrics/loss.tsv"):
        (project / name).write_text(f"the user's {name}\n")
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    result = run_cli(
        *TRAIN.replace("{episodes}", str(rows))
        .replace("--no-live", "--live-dir {tmp}/project")
        .format(**files)
        .split(),
        *flag,
    )
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert line.startswith(f"error: {project}: ")
    assert "was not written by `spag train` (its dvclive folder)" in line
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before
    assert not Path(files["out"]).exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:pw-42@127.0.0.1:notaport/v1",
        "http://alice:pw-42@[::1/v1",
        "alice:pw-42@127.0.0.1:8000/v1",
        "ftp://alice:pw-42@127.0.0.1/v1",
        "http://alice:pw/42@models.example.org/v1",
    ],
)
def test_a_bad_base_url_is_one_line_that_never_shows_its_password(files, tmp_path, url):
    """A URL the client cannot use is refused before any game; the one line masks the password even where the
    URL is too broken to parse."""
    result = run_cli(*(PLAY + " --backend openai").format(**files).split(), "--base-url", url)
    assert result.code == 2
    (line,) = result.error_lines()
    assert line.startswith("error: --base-url: expected an http:// or https:// URL") and "alice:***@" in line
    assert not Path(files["out"]).exists()
    assert "pw" not in line.replace("alice:***@", "")
    params = tmp_path / "params.yaml"
    params.write_text(f"play:\n  base_url: {json.dumps(url)}\n")
    checked = run_cli("config", "check", params)
    assert checked.code == 2
    (line,) = checked.error_lines()
    assert "play.base_url: expected an http" in line and "pw" not in line.replace("alice:***@", "")


# -------------------------------------------------------------------- one output rule for every command

ROWS_FILE = "{tmp}/rows.jsonl"
# Every output a command writes, as (arguments with {target}, the target's suffix, what is written there):
# "file" (any file), "episodes" (a .parquet file of episodes, spag's by its schema) or a folder
# ("dir:<kind>", the spag command that marks it).
OUTPUTS = {
    "words -o": ("words -o {target} --source {words}", ".txt", "file"),
    "words --train-out": ("words -o {tmp}/all.txt --source {words} --train-out {target}", ".txt", "file"),
    "words --eval-out": ("words -o {tmp}/all.txt --source {words} --eval-out {target}", ".txt", "file"),
    "judge -o": ("judge {episodes} -o {target}", ".jsonl", "file"),
    "prompt -o": (f"prompt {{episodes}} --params {PAPER} -o {{target}}", ".jsonl", "file"),
    "reward -o": ("reward {episodes} -o {target}", ".jsonl", "file"),
    "imitation-data -o": ("imitation-data {episodes} -o {target}", ".parquet", "file"),
    "play -o (a file)": (PLAY.replace("{out}", "{target}"), ".parquet", "episodes"),
    "play -o (a folder)": (PLAY.replace("{out}", "{target}"), "", "dir:play"),
    "play --export-json": (
        PLAY.replace("{out}", "{tmp}/played") + " --export-json {target}",
        ".json",
        "file",
    ),
    "evaluate -o": (EVALUATE.replace("{out}", "{target}"), ".json", "file"),
    "evaluate --episodes-out (a file)": (
        EVALUATE.replace("{out}", "{tmp}/m.json") + " --episodes-out {target}",
        ".parquet",
        "episodes",
    ),
    "evaluate --episodes-out (a folder)": (
        EVALUATE.replace("{out}", "{tmp}/m.json") + " --episodes-out {target}",
        "",
        "dir:evaluate",
    ),
    "benchmark -o": ("benchmark --model {tiny} -o {target} --limit 1", ".json", "file"),
    "benchmark --samples-out": (
        "benchmark --model {tiny} -o {tmp}/b.json --samples-out {target} --limit 1",
        ".jsonl",
        "file",
    ),
    "benchmark-data -o": ("benchmark-data -o {target}", "", "dir:benchmark-data"),
    "compare -o": ("compare {episodes} {words} -o {target}", ".json", "file"),
    "seeds -o": ("seeds {tmp} -o {target}", ".json", "file"),
    "tournament -o": (TOURNAMENT.replace("{out}", "{target}"), ".json", "file"),
    "tournament --heatmap": (
        TOURNAMENT.replace("{out}", "{tmp}/t.json") + " --heatmap {target}",
        ".png",
        "file",
    ),
    "tournament --episodes-out": (
        TOURNAMENT.replace("{out}", "{tmp}/t.json") + " --episodes-out {target}",
        "",
        "dir:tournament",
    ),
    "train -o": (TRAIN.replace("{episodes}", ROWS_FILE).replace("{out}", "{target}"), "", "dir:train"),
    "train --checkpoint-dir": (
        TRAIN.replace("{episodes}", ROWS_FILE) + " --checkpoint-dir {target}",
        "",
        "dir:train-checkpoints",
    ),
    "train --live-dir": (
        TRAIN.replace("{episodes}", ROWS_FILE).replace("--no-live", "--live-dir {target}"),
        "",
        "dir:train-live",
    ),
    "base-model -o": ("base-model -o {target} --wheel {missing}", "", "dir:base-model"),
    "strategy -o": ("strategy {tiny} -o {target} --samples 1 --max-new-tokens 2", "", "dir:strategy"),
}


def test_the_output_table_covers_every_command_with_an_output():
    writing = {args.split()[0] for args, _, _ in OUTPUTS.values()}
    assert writing == {args.split()[0] for args, _ in CASES.values()} - {"analyze", "config"}


def _spags(target: Path, what: str) -> None:
    """A previous output of spag's at ``target`` (what --overwrite may replace)."""
    from spag.game.episodes import write_episodes
    from spag.harness.claims import prepare_output_dir
    from spag.runtime.atomic import write_text_atomic

    if what == "episodes":
        write_episodes([EPISODE], target)
    elif what.startswith("dir:"):
        prepare_output_dir(target, what.removeprefix("dir:"))
    else:
        write_text_atomic(target, "spag wrote this\n")


def _special_file(path: Path, kind: str, device: tuple[int, int]) -> None:
    """A FIFO, or a character device node with the (major, minor) numbers ``device``, at ``path`` in a
    temporary folder (a device node needs root: the test is skipped without)."""
    import stat

    if kind == "FIFO":
        os.mkfifo(path)
        return
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*device))


def _make_target(kind: str, target: Path, what: str, tmp_path: Path) -> None:
    import socket

    if kind == "foreign file":
        target.write_text("the user's data\n")
    elif kind == "read-only, spag's":
        _spags(target, what)
        target.chmod(0o555 if target.is_dir() else 0o444)
    elif kind in ("FIFO", "device node"):
        _special_file(target, kind, device=(1, 3))  # a device node is what /dev/null is
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(target.name)  # relative to the test's folder: a socket path is short
    elif kind == "symlink to a foreign file":
        (tmp_path / "theirs").mkdir()
        (tmp_path / "theirs" / "data").write_text("the user's data\n")
        target.symlink_to(tmp_path / "theirs" / "data")
    elif kind == "dangling symlink":
        target.symlink_to(tmp_path / "nowhere" / "at_all")


def _state(tmp_path: Path) -> dict:
    """Every path under ``tmp_path``: its type, its link target and its bytes."""
    import stat

    state = {}
    for path in tmp_path.rglob("*"):
        st = path.lstat()
        state[path] = (
            stat.S_IFMT(st.st_mode),
            os.readlink(path) if path.is_symlink() else None,
            path.read_bytes() if stat.S_ISREG(st.st_mode) else None,
        )
    return state


TARGETS = {
    "foreign file": "was not written by spag|not episodes spag wrote|not a directory",
    "read-only, spag's": "read-only",
    "FIFO": "is a FIFO",
    "device node": "is a character device",
    "socket": "is a socket",
    "symlink to a foreign file": "was not written by spag|not episodes spag wrote|not a directory",
    "dangling symlink": "which does not exist",
}


@pytest.mark.parametrize("kind", TARGETS)
@pytest.mark.parametrize("output", OUTPUTS)
def test_an_output_path_is_never_replaced_unless_it_is_spags(files, tmp_path, monkeypatch, output, kind):
    """The output rule, for every output of every command: with --overwrite (the most a user can allow),
    a foreign file, a read-only file, a FIFO, a device node, a socket and a symlink's foreign target are
    left exactly as they are, and the command stops with one line naming the path and exit code 2."""
    import re

    monkeypatch.chdir(tmp_path)
    args, suffix, what = OUTPUTS[output]
    (tmp_path / "rows.jsonl").write_text(
        json.dumps({"prompt": "Say hi.", "completion": "hi", "kind": "sft"}) + "\n"
    )
    target = tmp_path / f"target{suffix}"
    _make_target(kind, target, what, tmp_path)
    before = _state(tmp_path)
    result = run_cli(*args.replace("{target}", str(target)).format(**files).split(), "--overwrite")
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert line.startswith(f"error: {target}: ") and re.search(TARGETS[kind], line), line
    assert _state(tmp_path) == before


# spag train's checkpoint and dvclive folders are its working folders, not results: a new run replaces the
# checkpoints and curves spag wrote there (saying so), never anything else (docs/reliability.md).
@pytest.mark.parametrize(
    "output",
    [
        name
        for name, (_, _, what) in OUTPUTS.items()
        if what not in ("dir:train-live", "dir:train-checkpoints")
    ],
)
def test_a_previous_output_is_replaced_only_with_overwrite(files, tmp_path, output):
    args, suffix, what = OUTPUTS[output]
    (tmp_path / "rows.jsonl").write_text(
        json.dumps({"prompt": "Say hi.", "completion": "hi", "kind": "sft"}) + "\n"
    )
    target = tmp_path / f"target{suffix}"
    _spags(target, what)
    (target / "NOTES.md").write_text("mine") if target.is_dir() else None
    before = _state(tmp_path)
    result = run_cli(*args.replace("{target}", str(target)).format(**files).split())
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert line.startswith(f"error: {target}: ") and "--overwrite" in line, line
    assert _state(tmp_path) == before


@pytest.mark.parametrize(
    "command",
    ["words -o {target} --source {words}", "judge {episodes} -o {target}", "reward {episodes} -o {target}"],
)
def test_overwrite_writes_through_a_symlink_and_keeps_the_link(files, tmp_path, command):
    real = tmp_path / "real" / "out.jsonl"
    real.parent.mkdir()
    first = run_cli(*command.replace("{target}", str(real)).format(**files).split())
    assert first.code == 0, first.stderr
    written = real.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    again = run_cli(*command.replace("{target}", str(link)).format(**files).split(), "--overwrite")
    assert again.code == 0, again.stderr
    assert link.is_symlink() and os.readlink(link) == str(real) and real.read_bytes() == written
    real.write_bytes(written)  # the same bytes, but written since by someone else: no longer spag's file
    changed = run_cli(*command.replace("{target}", str(link)).format(**files).split(), "--overwrite")
    assert changed.code == 2 and "was changed since" in changed.error_lines()[0]
    assert link.is_symlink() and real.read_bytes() == written


FAST_TRAIN = ["--max-steps", "1", "--batch-size", "1", "--grad-accum", "1", "--save-steps", "1"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "command, kind",
    [
        (TRAIN.replace("{episodes}", ROWS_FILE) + " " + " ".join(FAST_TRAIN), "train"),
        (PLAY + " --max-turns 1 --max-new-tokens 2", "play"),
        (
            EVALUATE.replace("{out}", "{tmp}/m.json")
            + " --episodes-out {out} --max-turns 1 --max-new-tokens 2",
            "evaluate",
        ),
    ],
)
def test_overwrite_of_a_folder_removes_only_what_spag_wrote(files, tmp_path, command, kind):
    """`--overwrite` replaced the whole folder, deleting a user's NOTES.md and subfolders."""
    (tmp_path / "rows.jsonl").write_text(
        json.dumps({"prompt": "Say hi.", "completion": "hi", "kind": "sft"}) + "\n"
    )
    args = command.format(**files).split()
    out = Path(files["out"])
    first = run_cli(*args)
    assert first.code == 0, first.stderr
    spags = sorted(p.name for p in out.iterdir())
    (out / "NOTES.md").write_text("n\n")
    (out / "mine" / "deeper").mkdir(parents=True)
    (out / "mine" / "deeper" / "data.csv").write_text("1,2\n")
    again = run_cli(*args, "--overwrite", *(["--overwrite"] if kind == "evaluate" else []))
    assert again.code == 0, again.stderr
    assert (out / "NOTES.md").read_text() == "n\n" and (
        out / "mine" / "deeper" / "data.csv"
    ).read_text() == "1,2\n"
    assert sorted(p.name for p in out.iterdir()) == sorted([*spags, "NOTES.md", "mine"])
    if kind == "train":  # the new model moved in beside the user's files, and is what spag records there
        from spag.harness.manifest import written_by_spag

        assert written_by_spag(out / "training_summary.json") and not written_by_spag(out / "NOTES.md")


# ---------------------------------------------------------------------------- one writer per output


HOLDER = """
import sys, time
from spag.harness.locks import writing
with writing(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def held(tmp_path):
    """Another process writing ``tmp_path/out``: it holds the output's lock until the test ends."""
    import subprocess
    import sys

    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    yield out, holder.pid
    holder.kill()
    holder.wait()


@pytest.mark.parametrize(
    "command",
    [
        PLAY,
        "reward {episodes} -o {out}",
        "words -o {out} --source {words}",
        TRAIN.replace("{episodes}", ROWS_FILE) + " --max-steps 1",
    ],
)
def test_a_second_writer_of_an_output_is_refused_naming_the_first(files, tmp_path, held, command):
    """Two `spag play -o DIR` started at once both ran and kept every game twice."""
    (tmp_path / "rows.jsonl").write_text(
        json.dumps({"prompt": "Say hi.", "completion": "hi", "kind": "sft"}) + "\n"
    )
    out, pid = held
    before = _state(tmp_path)
    result = run_cli(*command.format(**files).split())
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert (
        line.startswith(f"error: {out}: is being written by another spag process (pid {pid} of ")
        and "wait for it to end" in line
    )
    assert _state(tmp_path) == before


def test_the_lock_goes_with_its_writer(files, tmp_path):
    """A writer killed with SIGKILL leaves no lock (the kernel's), at most its small file, which the next
    writer takes over."""
    import signal
    import subprocess
    import sys

    out = Path(files["out"])
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (tmp_path / ".out.spag-lock").exists()
    result = run_cli("words", "-o", out, "--source", files["words"])
    assert result.code == 0, result.stderr
    assert out.read_text() == "apple\nriver\n" and not (tmp_path / ".out.spag-lock").exists()


def test_a_new_file_that_appears_meanwhile_is_not_replaced(tmp_path):
    """A new file (a shard) is checked again when it is published (by a hard link, which never replaces a
    file): a file another writer put there meanwhile stays."""
    from spag.runtime.atomic import atomic_path
    from spag.runtime.errors import OutputExists

    target = tmp_path / "shard-00000.parquet"
    with pytest.raises(OutputExists), atomic_path(target, new=True) as tmp:
        tmp.write_text("ours")
        target.write_text("theirs")
    assert target.read_text() == "theirs" and [p.name for p in tmp_path.iterdir()] == [target.name]


@pytest.mark.slow
def test_two_plays_into_one_folder_cannot_double_the_games(tmp_path):
    """M4, as the QA pass ran it: the second `spag play -o DIR` stops at once, naming the first; the games
    in DIR are each played once."""
    import subprocess
    import sys
    import time

    from spag.game.episodes import read_episodes
    from spag.testing import make_scripted_checkpoint

    model = make_scripted_checkpoint(tmp_path / "talker", "blah", loop=True)  # never ends: long utterances
    words = tmp_path / "words.txt"
    words.write_text(
        "".join(f"{w}\n" for w in ("apple", "river", "stone", "cloud", "bread", "chair", "glass", "horse"))
    )
    out = tmp_path / "episodes"
    args = [
        "play",
        "--attacker",
        model,
        "--defender",
        model,
        "--words",
        words,
        "-o",
        out,
        "--no-progress",
        "--batch-size",
        "2",
        "--max-new-tokens",
        "200",
        "--temperature",
        "0",
    ]
    first = subprocess.Popen(
        [sys.executable, "-m", "spag.cli", *map(str, args)], stderr=subprocess.PIPE, text=True
    )
    lock = tmp_path / ".episodes.spag-lock"
    for _ in range(600):
        if lock.exists() or first.poll() is not None:
            break
        time.sleep(0.1)
    second = run_cli(*args)
    still_running = first.poll() is None
    first.terminate()
    _, err = first.communicate(timeout=120)
    assert still_running, err
    assert second.code == 2
    (line,) = second.error_lines()
    assert f"is being written by another spag process (pid {first.pid} of " in line and "spag play" in line
    played = read_episodes(out) if any(out.glob("*.parquet")) else []
    indices = [e["word_index"] for e in played]
    assert len(indices) == len(set(indices))


# ------------------------------------------------------------------------------------- spag analyze


@pytest.fixture
def episode_files(tmp_path):
    from spag.game.episodes import write_episodes

    folder = tmp_path / "data" / "epoch_1" / "episodes"
    write_episodes([{**EPISODE, "outcome": "defender_wins", "turns": 1}], folder / "shard-00000.parquet")
    return folder


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_text('.tmp/*')",
        "SELECT * FROM read_text('.tmp/secret')",
        "SELECT * FROM glob('.tmp/*')",
    ],
)
def test_analyze_cannot_read_the_working_folders_tmp(episode_files, tmp_path, monkeypatch, sql):
    """DuckDB always lets a query read its temporary folder, by default `.tmp` of the working folder."""
    import tempfile

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "secret").write_text("password-42\n")
    private_before = set(Path(tempfile.gettempdir()).glob("spag-analyze-*"))
    result = run_cli("analyze", episode_files, "--sql", sql)
    assert "password-42" not in result.stdout + result.stderr and ".tmp/secret" not in result.stdout
    assert result.code == 2 or result.stdout.count("\n") <= 3, result.stdout  # glob: no file of yours listed
    if result.code == 2:
        (line,) = result.error_lines()
        assert line.startswith("error: query sql failed") and "disabled" in line
    assert set(Path(tempfile.gettempdir()).glob("spag-analyze-*")) <= private_before  # its own, removed


HEAVY = "SELECT count(*) FROM range(1000000000) a, range(1000000000) b"


def test_analyze_stops_a_query_at_its_time_limit(episode_files):
    """A cross join of two huge ranges ran for 15 minutes and more."""
    result = run_cli("analyze", episode_files, "--sql", HEAVY, "--time-limit", "1")
    assert result.code == 2
    (line,) = result.error_lines()
    assert line == "error: query sql stopped after 1 s, its time limit (--time-limit SECONDS)"


@pytest.mark.slow
@pytest.mark.parametrize(
    "signal_name, code, says",
    [
        ("SIGINT", 130, "error: interrupted (Ctrl-C); the query was stopped"),
        ("SIGTERM", 143, "error: terminated (SIGTERM); the query was stopped"),
    ],
)
def test_ctrl_c_or_sigterm_stops_a_running_query_with_one_line(episode_files, signal_name, code, says):
    """Ctrl-C did nothing, SIGTERM gave a traceback or was ignored."""
    import signal
    import subprocess
    import sys
    import time

    private = episode_files.parent / "tmp"  # where the query's private temporary folder appears
    private.mkdir()
    query = subprocess.Popen(
        [sys.executable, "-m", "spag.cli", "analyze", str(episode_files), "--sql", HEAVY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(private)},
    )
    deadline = time.monotonic() + 120
    while not any(private.iterdir()) and query.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until the command is connecting: its signal handlers are in place
    time.sleep(0.5)
    assert query.poll() is None
    query.send_signal(getattr(signal, signal_name))
    _, err = query.communicate(timeout=60)
    assert query.returncode == code, err
    assert err.strip().splitlines() == [says]


TYPES = (
    "INTERVAL 1 DAY AS i, gen_random_uuid() AS u, 170141183460469231731687303715884105727::HUGEINT AS h, "
    "1.5::DECIMAL(10,2) AS d, 'ab'::BLOB AS b, '101'::BIT AS bit, TIME '12:00:00' AS t, "
    "TIMETZ '12:00:00+01' AS ttz, TIMESTAMP_NS '2020-01-01 00:00:00.123456789' AS tns, "
    "TIMESTAMPTZ '2020-01-01 00:00:00+00' AS tz, DATE 'infinity' AS dinf, MAP {'a': 1} AS m, "
    "MAP {[1]: 'a'} AS listkey, {'x': [1, 2]} AS s, [1, 2]::INTEGER[2] AS arr, union_value(num := 2) AS un, "
    "'x'::ENUM('x', 'y') AS e, 'nan'::DOUBLE AS n, '-infinity'::DOUBLE AS ninf, "
    "12345678901234567890123::VARINT AS vi, '{\"a\": 1}'::JSON AS j, 2::UHUGEINT AS uh, NULL AS nothing"
)


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_every_duckdb_type_is_written_in_every_format(episode_files, fmt):
    """`-f json` on an INTERVAL or a UUID ended in a TypeError traceback."""
    import csv
    import io

    result = run_cli("analyze", episode_files, "-f", fmt, "--sql", f"SELECT {TYPES}")
    assert result.code == 0, result.stderr
    if fmt == "json":
        (row,) = json.loads(result.stdout)
        assert row["i"] == "1 day, 0:00:00" and len(row["u"]) == 36 and row["b"] == "6162"
        assert (
            row["m"] == {"a": 1} and row["listkey"] == {"key": [[1]], "value": ["a"]} and row["arr"] == [1, 2]
        )
        assert row["n"] is None and row["ninf"] is None and row["nothing"] is None
        assert row["tz"].startswith("2020-01-01T00:00:00") and row["h"] == 2**127 - 1
    elif fmt == "csv":
        header, values = list(csv.reader(io.StringIO(result.stdout)))
        row = dict(zip(header, values))
        assert row["i"] == "1 day, 0:00:00" and row["s"] == '{"x": [1, 2]}' and row["n"] == "nan"
        assert row["nothing"] == "" and row["b"] == "6162"
    else:
        assert "1 day, 0:00:00" in result.stdout and '{"x": [1, 2]}' in result.stdout


def test_a_dollar_word_inside_a_string_is_text_not_a_parameter(episode_files):
    """`--sql "SELECT '$x'"` asked for a parameter x."""
    result = run_cli(
        "analyze",
        episode_files,
        "-f",
        "json",
        "--sql",
        'SELECT \'$x\' AS s, "$y" FROM (SELECT 1 AS "$y") -- $z',
    )
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout) == [{"s": "$x", "$y": 1}]
    needs = run_cli("analyze", episode_files, "--sql", "SELECT count(*) FROM episodes WHERE turns >= $least")
    assert needs.code == 2 and "needs parameter(s) least" in needs.error_lines()[0]


# ----------------------------------------------------------------------------------- settings files


def _deep_block(levels: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(levels)) + "  " * levels + "x: 1\n"


BAD_PARAMS = {
    "nested 5,000 levels in brackets": (
        "seed: " + "[" * 5000 + "]" * 5000 + "\n",
        "nested deeper than 32 levels",
    ),
    "nested 300 levels by indentation": (_deep_block(300), "nested deeper than 32 levels"),
    "a list as a key": ("? [a, b]\n: 1\n", "a key must be a plain name, not a sequence"),
    "a mapping as a key": ("? {a: 1}\n: 1\n", "a key must be a plain name, not a mapping"),
    "larger than 1 MiB": ("# padding\n" * 120_000, "is larger than 1 MiB"),
}


@pytest.mark.parametrize("how", ["config check", "--override", "prompt --params"])
@pytest.mark.parametrize("name", BAD_PARAMS)
def test_a_hostile_settings_file_is_one_line(files, tmp_path, how, name):
    """A file nested 5,000 levels deep gave a RecursionError, a list as a key `TypeError: unhashable`,
    in `spag config check`, through --override and through `spag prompt --params`."""
    text, says = BAD_PARAMS[name]
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    args = {
        "config check": ["config", "check", bad],
        "--override": ["config", "show", PAPER, "--override", bad],
        "prompt --params": ["prompt", files["episodes"], "--params", bad, "-o", files["out"]],
    }[how]
    result = run_cli(*args)
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert line.startswith(f"error: {bad}: ") and says in line and len(line) < 300, line
    assert not Path(files["out"]).exists()


@pytest.mark.parametrize("kind", ["FIFO", "device node", "folder"])
def test_a_settings_file_that_is_no_regular_file_is_refused_at_once(tmp_path, kind):
    """`spag config check` waited forever on a FIFO and ran out of memory on /dev/zero."""
    path = tmp_path / "params.yaml"
    if kind == "folder":
        path.mkdir()
    else:
        _special_file(path, kind, device=(1, 5))  # a device node is what /dev/zero is
    for args in (["config", "check", path], ["config", "show", PAPER, "--override", path]):
        result = run_cli(*args)
        assert result.code == 2
        (line,) = result.error_lines()
        assert line.startswith(f"error: {path}: is a ") and "not a params file" in line


def test_yaml_merge_keys_are_allowed_and_explicit_keys_win(tmp_path):
    """`<<: *anchor` was refused, although the loader meant to allow it."""
    from spag.config import load_settings

    params = tmp_path / "params.yaml"
    params.write_text(
        "imitate: &training\n  batch_size: 3\n  grad_accum: 4\nspag:\n  <<: *training\n  grad_accum: 6\n"
    )
    assert run_cli("config", "check", params).code == 0
    settings = load_settings(params)
    assert (settings.spag.batch_size, settings.spag.grad_accum) == (3, 6)
    params.write_text("spag:\n  batch_size: 3\n  batch_size: 4\n")  # a key given twice is still an error
    result = run_cli("config", "check", params)
    assert result.code == 2 and "'batch_size' is given twice" in result.error_lines()[0]


@pytest.mark.slow
def test_validating_many_epochs_takes_linear_time(tmp_path):
    """Checking each epoch against all the others made 8,000 epochs take 20 s (and 32,000 five
    minutes; 16,000 over a minute). As its own process with a time limit, so a regression fails here
    instead of stalling."""
    import subprocess
    import sys

    import yaml

    epochs = {str(i): {"previous": "imitation" if i == 1 else f"epoch_{i - 1}"} for i in range(1, 16_001)}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"spag": {"epochs": epochs}}))
    result = subprocess.run(
        [sys.executable, "-m", "spag.cli", "config", "check", str(params)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "16000 SPAG epochs" in result.stderr


def test_an_override_error_names_the_override_file(tmp_path):
    """A bad value from an --override file was told as the params file's."""
    override = tmp_path / "toy.yaml"
    override.write_text("play.temperature: -1\n")
    result = run_cli("config", "show", PAPER, "--override", override)
    assert result.code == 2
    (line,) = result.error_lines()
    assert line == f"error: {override}: play.temperature: must be >= 0, got -1"
    override.write_text("spag.epochs: {'1': {previous: epoch_3}}\n")
    (line,) = run_cli("config", "show", PAPER, "--override", override).error_lines()
    assert line.startswith(
        f"error: {override}: spag.epochs.1.previous: 'epoch_3' is not one of base, imitation"
    )
    (PAPER_BAD := tmp_path / "params.yaml").write_text("play:\n  temperature: -2\n")
    (line,) = run_cli("config", "show", PAPER_BAD, "--override", override).error_lines()
    assert line.startswith(f"error: {PAPER_BAD}: play.temperature")  # the file's own bad value is the file's


@pytest.mark.parametrize("null", ["null", "none"])
@pytest.mark.parametrize("command", ["reward", "imitation-data"])
def test_null_on_the_command_line_means_none(files, tmp_path, monkeypatch, command, null):
    """`--sft null` (the help's own word for none) was read as a file named null."""
    monkeypatch.chdir(tmp_path)
    result = run_cli(
        command, files["episodes"], "-o", tmp_path / "rows.jsonl", "--sft", null, "--templates", null
    )
    assert result.code == 0, result.stderr
    assert "sft: none" in result.stderr or "general rows" not in result.stderr
    (tmp_path / "null").write_text("not a data file\n")
    as_file = run_cli(command, files["episodes"], "-o", tmp_path / "rows2.jsonl", "--sft", "./null")
    assert as_file.code == 2 and "null" in as_file.error_lines()[-1]


# ---------------------------------------------------------------------------------- training faults


def _rows(tmp_path, completions=("hi",) * 4):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"prompt": f"Say {i}.", "completion": c, "kind": "sft"}) + "\n"
            for i, c in enumerate(completions)
        )
    )
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("damaged", ["optimizer.pt", "model.safetensors"])
def test_a_damaged_newest_checkpoint_is_passed_over_for_the_one_before(files, tmp_path, damaged):
    """`truncate -s 1000 checkpoint-4/optimizer.pt` (or the weights), then --resume: a traceback."""
    out = tmp_path / "model"
    args = [
        "train",
        "--method",
        "sft",
        "--model",
        files["tiny"],
        "--data",
        _rows(tmp_path),
        "-o",
        out,
        "--no-live",
        "--batch-size",
        "1",
        "--grad-accum",
        "1",
        "--save-steps",
        "2",
        "--keep-checkpoints",
        "--device",
        "cpu",
    ]
    first = run_cli(*args, "--max-steps", "4")
    assert first.code == 0, first.stderr
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == [
        "checkpoint-2",
        "checkpoint-4",
    ]
    os.truncate(out / "checkpoints" / "checkpoint-4" / damaged, 1000)
    resumed = run_cli(*args, "--max-steps", "6", "--resume")
    assert resumed.code == 0, resumed.stderr
    assert f"note: checkpoint-4 is damaged ({damaged}: " in resumed.stdout
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-2") and summary["steps"] == 6


def test_a_launcher_that_writes_no_model_is_an_error(files, tmp_path):
    """`--launcher echo` exited 0 with no model and no summary."""
    out = tmp_path / "model"
    result = run_cli(
        *TRAIN.replace("{episodes}", str(_rows(tmp_path))).replace("{out}", str(out)).format(**files).split(),
        "--launcher",
        "echo",
    )
    assert result.code == 2
    line = result.error_lines()[-1]
    assert line.startswith(f"error: {out}: the launcher 'echo' exited without error but wrote no model here")
    assert not (out / "training_summary.json").exists()


@pytest.mark.parametrize(
    "launcher, says",
    [
        ('torchrun "x', "--launcher: 'torchrun \"x' is not a command line (No closing quotation)"),
        ("no-such-launcher-42 --nproc 2", "'no-such-launcher-42': no such program"),
        ("   ", "--launcher: is empty"),
    ],
)
def test_a_bad_launcher_is_one_line_before_any_work(files, tmp_path, launcher, says):
    """`--launcher 'torchrun \"x'` crashed with `ValueError: No closing quotation`."""
    _rows(tmp_path)
    result = run_cli(*TRAIN.replace("{episodes}", ROWS_FILE).format(**files).split(), "--launcher", launcher)
    assert result.code == 2
    (line,) = result.error_lines()
    assert line.startswith("error: --launcher: ") and says in line, line
    assert not Path(files["out"]).exists()


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "not valid JSON (line 1: Expecting property name"),
        ("[1, 2]", "expected a JSON object of DeepSpeed settings, got list"),
        ('"zero"', "got str"),
    ],
)
@pytest.mark.parametrize("launcher", [[], ["--launcher", "torchrun --nproc_per_node 1"]])
def test_a_bad_deepspeed_file_is_one_line_before_any_work(files, tmp_path, content, says, launcher):
    """`--deepspeed bad.json` (invalid JSON, or a list) gave a 68-line traceback after 53 s."""
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    _rows(tmp_path)
    result = run_cli(
        *TRAIN.replace("{episodes}", ROWS_FILE).format(**files).split(), "--deepspeed", bad, *launcher
    )
    assert result.code == 2
    (line,) = result.error_lines()
    assert line.startswith(f"error: {bad}: ") and says in line and line.endswith("(--deepspeed)"), line
    assert not Path(files["out"]).exists()


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("launcher", 'torchrun "x', "spag.launcher: not a command line"),
        ("launcher", "", "spag.launcher: an empty command line"),
    ],
)
def test_a_bad_launcher_in_a_params_file_is_refused_by_config_check(tmp_path, key, value, says):
    params = tmp_path / "params.yaml"
    params.write_text(f"spag:\n  {key}: {json.dumps(value)}\n")
    result = run_cli("config", "check", params)
    assert result.code == 2
    assert says in result.error_lines()[0]


def test_training_rows_with_an_empty_completion_are_warned_of(files, tmp_path):
    """Rows with an empty completion passed without a word."""
    rows = _rows(tmp_path, ("hi", "", "  ", "ok"))
    out = tmp_path / "model"
    result = run_cli(
        *TRAIN.replace("{episodes}", str(rows)).replace("{out}", str(out)).format(**files).split(),
        "--max-steps",
        "1",
        "--batch-size",
        "1",
        "--grad-accum",
        "1",
    )
    assert result.code == 0, result.stderr
    assert (
        f"warning: {rows}: 2 of 4 rows have an empty completion (the first: record 1); each is learned as "
        "ending the turn at once"
    ) in result.stderr


# ---------------------------------------------------------------------------------------- the rest


def test_compare_never_writes_over_a_samples_file_it_reads(tmp_path):
    """`spag compare B1.json B2.json -o B1.samples.jsonl` overwrote a file compare itself reads."""
    for name in ("b1", "b2"):
        (tmp_path / f"{name}.json").write_text(
            json.dumps({"tasks": {}, "samples_file": f"{name}.samples.jsonl"})
        )
        (tmp_path / f"{name}.samples.jsonl").write_text('{"task": "t", "doc_id": 0, "correct": 1}\n')
    before = _state(tmp_path)
    for target, says in (("b1.samples.jsonl", "A's samples"), ("b2.samples.jsonl", "B's samples")):
        result = run_cli(
            "compare", tmp_path / "b1.json", tmp_path / "b2.json", "-o", tmp_path / target, "--overwrite"
        )
        assert result.code == 2
        (line,) = result.error_lines()
        assert (
            line
            == f"error: {tmp_path / target}: -o is the same file as {says} (the input); choose another path"
        )
    assert _state(tmp_path) == before


def test_prompt_on_a_finished_game_is_one_line(tmp_path):
    """`spag prompt` on a finished game printed "round 2 of 1"."""
    states = tmp_path / "states.jsonl"
    over = {
        "id": "g",
        "target_word": "apple",
        "max_turns": 1,
        "history": [{"role": "attacker", "content": "a fruit"}, {"role": "defender", "content": "a pear?"}],
    }
    states.write_text(json.dumps({**over, "history": []}) + "\n" + json.dumps(over) + "\n")
    result = run_cli("prompt", states, "--params", PAPER, "-o", tmp_path / "prompts.jsonl")
    assert result.code == 2
    (line,) = result.error_lines()
    assert (
        line
        == f"error: {states}: record 1: the game is over (2 utterances, 1 rounds): there is no next prompt"
    )
    assert not (tmp_path / "prompts.jsonl").exists()


@pytest.mark.slow
def test_ctrl_c_during_play_is_one_line(tmp_path):
    """Ctrl-C during `spag play` exited 130 without a word (typer turned it into a silent exit)."""
    import signal
    import subprocess
    import sys

    from spag.testing import make_scripted_checkpoint

    model = make_scripted_checkpoint(tmp_path / "talker", "blah", loop=True)
    words = tmp_path / "words.txt"
    words.write_text("apple\nriver\nstone\ncloud\n")
    out = tmp_path / "episodes"
    play = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spag.cli",
            "play",
            "--attacker",
            model,
            "--defender",
            model,
            "--words",
            words,
            "-o",
            out,
            "--max-new-tokens",
            "400",
            "--batch-size",
            "2",
            "--no-progress",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = tmp_path / ".episodes.spag-lock"
    for _ in range(600):  # the lock is taken once the words and models are checked: the run has begun
        if lock.exists() or play.poll() is not None:
            break
        subprocess.run(["sleep", "0.1"])
    play.send_signal(signal.SIGINT)
    _, err = play.communicate(timeout=120)
    assert play.returncode == 130, err
    assert err.strip().splitlines()[-1] == "error: interrupted (Ctrl-C); finished work was kept"
    assert "Traceback" not in err


def test_a_full_disk_names_the_file_not_its_temporary_copy(tmp_path):
    """A full disk ("No space left on device") was reported without the file. A file size limit fails the write the same way (EFBIG);
    the error names the output, and no temporary file is left."""
    import resource
    import subprocess
    import sys

    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text((json.dumps(EPISODE) + "\n") * 200)
    out = tmp_path / "judged.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "spag.cli", "judge", str(episodes), "-o", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000)),
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {out}: cannot be written: File too large"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes.jsonl"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_named_not_the_temporary_file(files, tmp_path):
    """Writing into a read-only folder named the hidden temporary file."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        result = run_cli("words", "-o", folder / "out.txt", "--source", files["words"])
    finally:
        folder.chmod(0o755)
    assert result.code == 2
    (line,) = result.error_lines()
    assert line == f"error: {folder / 'out.txt'}: cannot be written: the folder {folder} is not writable (-o)"


# ------------------------------------------------------------------------- results stay current (M10)


def test_dvc_yaml_is_written_from_the_stage_table():
    """dvc.yaml is generated (python -m spag.pipeline.dvcyaml): the committed file is what the table declares."""
    from spag.pipeline.dvcyaml import render

    assert (Path(__file__).resolve().parent.parent / "dvc.yaml").read_text(encoding="utf-8") == render(), (
        "dvc.yaml is stale: run `python -m spag.pipeline.dvcyaml`"
    )


def test_every_data_file_under_spag_is_a_dependency_or_read_by_no_stage():
    from spag.pipeline.dvcyaml import DATA, NOT_READ
    from spag.pipeline.imports import PACKAGE, ROOT

    declared = {path for paths in DATA.values() for path in paths} | set(NOT_READ)
    for path in PACKAGE.rglob("*"):
        if path.is_file() and path.suffix not in (".py", ".pyc"):
            relative = path.relative_to(ROOT).as_posix()
            assert any(relative == d or relative.startswith(d + "/") for d in declared), relative


def test_no_stage_depends_on_the_command_line():
    from spag.pipeline.dvcyaml import stage_files
    from spag.pipeline.table import STAGES

    for stage in STAGES:
        files = stage_files(stage)
        assert not [f for f in files if f == "spag/cli.py" or f.startswith("spag/commands/")], stage.name
        assert "spag/pipeline/dvcyaml.py" not in files


@pytest.mark.slow
def test_dvc_status_names_the_stages_whose_code_changed(tmp_path):
    """Editing spag/game/words.py (the held-out split) left every stage "up to date". Every stage's outputs
    are committed as they are (no stage runs), then one source file changes: `dvc status` names exactly
    the stages that run it, and not those downstream of them only through their data."""
    import subprocess
    import sys

    import yaml

    from spag.pipeline.table import STAGES

    root = Path(__file__).resolve().parent.parent
    work = tmp_path / "project"
    shutil.copytree(root / "spag", work / "spag", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "stages", work / "stages")
    for name in ("dvc.yaml", ".dvcignore", "params.yaml"):
        shutil.copy(root / name, work / name)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def dvc(*args):
        result = subprocess.run(["dvc", *args], cwd=work, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return result.stdout

    dvc("init", "--no-scm", "-q")
    epochs = yaml.safe_load((work / "params.yaml").read_text())["spag"]["epochs"]
    for stage in STAGES:
        for epoch, entry in epochs.items() if stage.per_epoch else [(None, {"previous": None})]:
            for path in [p for p, _ in stage.outs] + list(stage.metrics) + list(stage.plots):
                out = work / path.format(epoch=epoch, previous=entry["previous"])
                if out.suffix:  # a file
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(f"{out.name}\n")
                else:  # a folder
                    out.mkdir(parents=True, exist_ok=True)
                    (out / "part").write_text("a part\n")
    dvc("commit", "-f", "-q")
    assert json.loads(dvc("status", "--json")) == {}
    (work / "spag" / "evaluate" / "tasks" / "__pycache__").mkdir()  # byte code written by running the code
    (work / "spag" / "evaluate" / "tasks" / "__pycache__" / "generate.cpython-311.pyc").write_bytes(b"\0")
    assert json.loads(dvc("status", "--json")) == {}

    def changed_by(source: str) -> set[str]:
        path = work / "spag" / source
        original = path.read_text()
        path.write_text(original + "\n# an edit\n")
        try:
            return set(json.loads(dvc("status", "--json")))
        finally:
            path.write_text(original)

    epoch_names = lambda name: {f"{name}@{e}" for e in epochs}
    # the report's tabular twin (Kuhn poker) builds its rows with spag reward's code and trains with its loss
    assert changed_by("rewards/build.py") == {"imitation_data", "report"} | epoch_names("reward")
    # the word lists are Adversarial Taboo's targets: stage words and every stage that plays the game read
    # them; the settings are validated from the games' cards, so base_model, benchmark_data and imitate do not
    everything = {stage.name for stage in STAGES if not stage.per_epoch}
    everything |= {name for stage in STAGES if stage.per_epoch for name in epoch_names(stage.name)}
    assert changed_by("game/words.py") == everything - {"base_model", "benchmark_data", "imitate"}
    assert changed_by("evaluate/benchmark.py") == {
        "benchmark_data",
        "evaluate_base",
        "evaluate_imitation",
        "report",
    } | epoch_names("evaluate")
    # the harness, the memory plan and a backend the default run does not choose are no stage's code
    for harness in ("pipeline/preflight.py", "pipeline/run.py", "models/memory.py", "players/openai.py"):
        assert changed_by(harness) == set(), harness
    # evaluate_base reads the base model's Kuhn poker strategy through spag.pipeline.evaluation, which runs it
    assert changed_by("evaluate/games.py") == (
        {"skill_clues", "evaluate_base", "evaluate_imitation", "baselines", "report"}
        | epoch_names("evaluate")
    )
    assert changed_by("train/losses.py") == {"imitate", "report"} | epoch_names("train")
    templates = changed_by("game/taboo/templates.yaml")
    assert templates >= {"imitation_data", "teacher_play"} | epoch_names("reward")
    assert not templates & {"base_model", "words", "benchmark_data"}
    assert changed_by("evaluate/tournament.py") == set()  # no stage runs a tournament
    assert changed_by("commands/reward.py") == set()  # the command line is no stage's code


# -------------------------------------------------------------------------- Kuhn poker deals and games

KUHN_HAND = {
    "target_word": "K-Q",
    "max_turns": 2,
    "history": [{"role": "first", "content": "[bet]"}, {"role": "second", "content": "[call]"}],
}


@pytest.mark.parametrize("deal", ["K-K", "k-q", "A-K"])
@pytest.mark.parametrize("command", ["judge", "prompt"])
def test_a_bad_kuhn_deal_is_one_line_naming_its_record(tmp_path, tiny, command, deal):
    """`spag judge --game kuhn-poker` and `spag prompt` ended in a traceback on a deal that is none."""
    states = tmp_path / "hands.jsonl"
    hands = [{**KUHN_HAND, "history": []}, {**KUHN_HAND, "target_word": deal, "history": []}]
    states.write_text("".join(json.dumps(hand) + "\n" for hand in hands))
    params = tmp_path / "kuhn.yaml"
    params.write_text("game: {name: kuhn-poker}\n")
    args = (
        ["judge", states, "--game", "kuhn-poker"]
        if command == "judge"
        else ["prompt", states, "--params", params, "--model", tiny]
    )
    result = run_cli(*args, "-o", tmp_path / "out.jsonl")
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert line.startswith(f"error: {states}: record 1: 'target_word': not a Kuhn poker deal: {deal!r}")
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_the_judge_refuses_episodes_of_another_game_naming_the_record(tmp_path, fmt):
    """Spag's Kuhn poker episodes judged as Adversarial Taboo (the default) gave a traceback from
    Parquet, and Taboo episodes under --game kuhn-poker were not judged as asked: both are refused."""
    from spag.game.episodes import write_episodes
    from spag.game.kuhn import KuhnPoker
    from spag.game.taboo import Taboo

    kuhn, taboo = tmp_path / f"kuhn.{fmt}", tmp_path / f"taboo.{fmt}"
    write_episodes([{**KUHN_HAND, **KuhnPoker().record()}], kuhn)
    write_episodes([{**EPISODE, **Taboo().record()}], taboo)
    for episodes, asked, played in ((kuhn, [], "kuhn-poker"), (taboo, ["--game", "kuhn-poker"], "taboo")):
        result = run_cli("judge", episodes, *asked, "-o", tmp_path / "out.jsonl")
        assert result.code == 2, result.stderr
        assert result.error_lines() == [
            f"error: {episodes}: record 0: was played in {played}, not "
            f"{'taboo' if played != 'taboo' else 'kuhn-poker'}: judge it with --game {played}"
        ]
    assert not (tmp_path / "out.jsonl").exists()
    assert run_cli("judge", kuhn, "--game", "kuhn-poker", "-o", tmp_path / "out.jsonl").code == 0


def test_play_names_the_line_of_a_bad_deal_before_loading_a_model(files, tmp_path):
    """A bad deal in `spag play --words` was found by the first game, after the models loaded."""
    deals = tmp_path / "deals.txt"
    deals.write_text("K-Q\n# a comment\nK-K\n")
    result = run_cli(
        "play",
        "--game",
        "kuhn-poker",
        "--attacker",
        files["not_a_model"],
        "--defender",
        files["not_a_model"],
        "--words",
        deals,
        "-o",
        tmp_path / "episodes",
        "--no-progress",
    )
    assert result.code == 2, result.stderr
    (line,) = result.error_lines()
    assert line.startswith(f"error: {deals}: line 3: not a Kuhn poker deal: 'K-K'")
    assert not (tmp_path / "episodes").exists()
