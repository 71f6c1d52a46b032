"""The settings schema (spag/config.py): params files, their one-line errors, `spag config`, the stages'
declared params against dvc.yaml, and the CLI's defaults taken from the schema."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spag.commands.options import cli_type
from spag.config import (
    BACKENDS,
    RENAMED,
    Play,
    Reward,
    Sampling,
    Settings,
    TrainConfig,
    TrainKnobs,
    TrainStep,
    Words,
    load_settings,
    validate,
)
from spag.game.taboo import Taboo
from spag.game.taboo.card import TabooSettings, TabooStrategies
from spag.pipeline.context import Declared, declared_params
from spag.pipeline.table import STAGE_PARAMS
from spag.play.engine import PlayConfig
from spag.players import load_player
from spag.players.options import BACKEND_OPTIONS, HFOptions
from spag.runtime.errors import ParamsError, UndeclaredParam
from spag.testing import run_cli

ROOT = Path(__file__).resolve().parent.parent


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def error_of(params: dict) -> str:
    with pytest.raises(ParamsError) as caught:
        validate(params, "params.yaml")
    return str(caught.value)


# ------------------------------------------------------------------------------------------ the schema


@pytest.mark.parametrize("name", ["params.yaml", "configs/paper.yaml"])
def test_shipped_params_files_validate_and_keep_their_values(name):
    settings = load_settings(ROOT / name)
    raw = load(name)
    assert settings.game.max_turns == raw["game"]["max_turns"]
    assert settings.spag.learning_rate == raw["spag"]["learning_rate"]
    assert list(settings.spag.epochs) == list(raw["spag"]["epochs"])


def test_misspelt_key_is_named_with_a_suggestion():
    p = load("params.yaml")
    p["spag"]["kl_coef"] = p["spag"].pop("kl_coeff")
    assert error_of(p) == "params.yaml: spag.kl_coef: unknown key (did you mean kl_coeff?)"
    p = load("params.yaml")
    p["play"]["temprature"] = 0.7
    assert error_of(p) == "params.yaml: play.temprature: unknown key (did you mean temperature?)"
    p = load("params.yaml")
    p["evalute"] = p.pop("evaluate")
    assert error_of(p) == "params.yaml: evalute: unknown key (did you mean evaluate?)"
    p = load("params.yaml")
    p["evaluate"]["benchmark"]["limt"] = 3
    assert error_of(p) == "params.yaml: evaluate.benchmark.limt: unknown key (did you mean limit?)"


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("words", "top", "many", "words.top: expected an integer, got 'many'"),
        ("words", "top", 2.5, "words.top: expected an integer, got 2.5"),
        ("spag", "detach_advantage", "yes", "spag.detach_advantage: expected true or false, got 'yes'"),
        ("play", "temperature", "hot", "play.temperature: expected a number, got 'hot'"),
        ("game", "rules", "loose", "game.rules: 'loose' is not one of whole-word, original"),
        ("play", "backend", "tpu", "play.backend: 'tpu' is not one of hf, vllm, openai"),
    ],
)
def test_wrong_type_or_choice_is_named(section, key, value, message):
    p = load("params.yaml")
    p[section][key] = value
    assert error_of(p) == f"params.yaml: {message}"


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("spag", "clip_range", 1.5, "spag.clip_range: must be < 1, got 1.5"),
        ("imitate", "learning_rate", 0.0, "imitate.learning_rate: must be > 0, got 0.0"),
        ("words", "eval_fraction", 1.2, "words.eval_fraction: must be <= 1, got 1.2"),
        ("game", "max_turns", 0, "game.max_turns: must be >= 1, got 0"),
        ("reward", "loser_reward", 0.5, "reward.loser_reward: must be <= 0, got 0.5"),
    ],
)
def test_out_of_range_value_is_named(section, key, value, message):
    p = load("params.yaml")
    p[section][key] = value
    assert error_of(p) == f"params.yaml: {message}"


def test_epochs_must_start_from_an_earlier_checkpoint():
    p = load("params.yaml")
    p["spag"]["epochs"]["2"] = {"previous": "epoch_2"}
    assert (
        error_of(p) == "params.yaml: spag.epochs.2.previous: 'epoch_2' is not one of base, epoch_1, imitation"
    )


def test_an_epoch_may_start_from_the_base_model_without_imitation(tmp_path):
    from spag.pipeline.context import Layout
    from spag.pipeline.table import STAGES

    p = load("params.yaml")
    p["spag"]["epochs"] = {"1": {"previous": "base"}, "2": {"previous": "epoch_1"}}
    assert validate(p).spag.epochs["1"].previous == "base"
    layout = Layout(tmp_path)
    assert layout.model("base") == layout.base_model == tmp_path / "data" / "base" / "model"
    assert layout.model("imitation") == tmp_path / "data" / "imitation" / "model"
    # every stage that starts from the previous checkpoint reads the base model's own folder, the one the
    # base_model stage writes: dvc.yaml's data/${item.previous}/model names it (tests/test_pipeline.py runs it)
    (written,) = [path for stage in STAGES if stage.name == "base_model" for path, _ in stage.outs]
    starts = {
        stage.name: [stage.resolved(d, "1", "base") for d in stage.deps]
        for stage in STAGES
        if stage.per_epoch
    }
    for name in ("play", "train", "evaluate"):
        assert written == "data/base/model" and written in starts[name]
    play = next(stage for stage in STAGES if stage.name == "play")
    assert play.resolved("data/{previous}/model", "2", "epoch_1") == "data/epoch_1/model"


def test_several_problems_are_all_listed_in_one_line():
    p = load("params.yaml")
    p["spag"]["kl_coef"] = 0.1
    p["play"]["top_k"] = -1
    assert error_of(p) == (
        "params.yaml: play.top_k: must be >= 0, got -1; spag.kl_coef: unknown key (did you mean kl_coeff?)"
    )  # the file named once


def test_a_file_that_is_no_yaml_mapping_is_one_line(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text("spag: [\n")
    with pytest.raises(ParamsError, match=r"params.yaml: line 2: not valid YAML"):
        load_settings(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ParamsError, match="expected a mapping of sections, got list"):
        load_settings(bad)


def test_play_config_holds_the_sections_and_of_routes_knobs_to_them():
    play = Play(temperature=0.5, top_k=7, max_new_tokens=9, batch_size=3)
    config = PlayConfig(Taboo(TabooSettings(max_turns=2, rules="original")), play, seed=11)
    assert config.sampling is play and (config.game.max_turns, config.game.settings.rules, config.seed) == (
        2,
        "original",
        11,
    )
    assert not config.strategies.coached_attacker  # self-play uses no teacher strategy
    built = PlayConfig.of(max_turns=2, rules="original", temperature=0.5, foul_retries=3, seed=4)
    assert (
        built.game.settings.rules,
        built.sampling.temperature,
        built.strategies.foul_retries,
        built.seed,
    ) == ("original", 0.5, 3, 4)
    with pytest.raises(ValueError, match="launcher: not a setting of the game taboo"):
        PlayConfig.of(launcher="torchrun")  # play's, not sampling's: no section of a PlayConfig declares it
    with pytest.raises(ValueError, match="max_turns"):
        PlayConfig.of(max_turns=0)
    assert PlayConfig.from_json(built.to_json()).to_json() == built.to_json()


def test_train_config_fills_the_papers_defaults_by_method():
    assert TrainConfig().resolved("offline-po").learning_rate == 2e-6
    assert TrainConfig().resolved("sft-kl").kl_coeff == 0.1
    assert TrainConfig(kl_coeff=0.3).resolved("sft-kl").kl_coeff == 0.3
    with pytest.raises(ValueError, match="lr_scheduler"):
        TrainConfig(lr_scheduler="cosine_restarts")


# ------------------------------------------------------------------------------------------ spag config


def spag(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "spag.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def test_config_check_accepts_the_shipped_files_and_names_a_typo(tmp_path):
    ok = spag("config", "check", ROOT / "configs/paper.yaml")
    assert ok.returncode == 0, ok.stderr
    assert "paper.yaml: valid" in ok.stderr and "3 SPAG epochs" in ok.stderr
    p = load("params.yaml")
    p["spag"]["kl_coef"] = p["spag"].pop("kl_coeff")
    typo = tmp_path / "params.yaml"
    typo.write_text(yaml.safe_dump(p))
    bad = spag("config", "check", typo)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == f"error: {typo}: spag.kl_coef: unknown key (did you mean kl_coeff?)"
    missing = spag("config", "check", tmp_path / "nowhere.yaml")
    assert missing.returncode == 2 and missing.stderr.strip().endswith("nowhere.yaml: no such file")


def test_a_seed_past_what_an_episode_file_holds_is_refused_before_any_work(tmp_path):
    """M1 (fourth attack): a seed of 2^63 played every game, then died in an OverflowError while writing,
    keeping nothing, and `spag config check` called it valid."""
    from spag.testing import run_cli

    p = load("params.yaml")
    p["seed"] = 2**63
    big = tmp_path / "params.yaml"
    big.write_text(yaml.safe_dump(p))
    checked = spag("config", "check", big)
    assert checked.returncode == 2 and checked.stderr.strip().startswith(f"error: {big}: seed: ")
    assert str(2**62) in checked.stderr
    played = run_cli(
        "play",
        "--attacker",
        "m",
        "--defender",
        "m",
        "--words",
        tmp_path / "w.txt",
        "-o",
        tmp_path / "out",
        "--seed",
        str(2**63),
    )
    assert played.code == 2 and "--seed" in played.stderr and not (tmp_path / "out").exists()


def test_config_check_names_a_launcher_that_is_not_installed(tmp_path):
    """`spag.launcher: nosuchprog` was called valid, though docs/reliability.md says the
    check reads the launcher's program."""
    p = load("params.yaml")
    p["spag"]["launcher"] = "nosuchprog --nproc_per_node 2"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(p))
    checked = spag("config", "check", path)
    assert checked.returncode == 2
    assert checked.stderr.strip().startswith(
        f"error: {path}: spag.launcher: nosuchprog is not installed here"
    )
    p["spag"]["launcher"] = "torchrun --standalone --nproc_per_node 2"  # installed: valid on any machine
    path.write_text(yaml.safe_dump(p))
    assert spag("config", "check", path).returncode == 0


def test_a_number_yaml_reads_as_text_gets_a_hint(tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text("spag:\n  learning_rate: 2e-5\n")
    checked = spag("config", "check", path)
    assert checked.returncode == 2 and checked.stderr.strip() == (
        f"error: {path}: spag.learning_rate: expected a number, got '2e-5' (YAML reads 2e-5 as text: write 2.0e-05)"
    )
    path.write_text("spag:\n  learning_rate: 2.0e-05\n")
    assert load_settings(path).spag.learning_rate == 2e-5


def test_config_show_prints_the_resolved_settings(tmp_path):
    (tmp_path / "params.yaml").write_text(
        "game:\n  max_turns: 3\nspag:\n  epochs:\n    '1': {previous: imitation}\n"
    )
    shown = spag("config", "show", cwd=tmp_path)  # ./params.yaml by default
    assert shown.returncode == 0, shown.stderr
    resolved = yaml.safe_load(shown.stdout)
    assert resolved["game"]["max_turns"] == 3  # the file's value
    assert resolved["play"]["temperature"] == Play().temperature  # a default for what it leaves out
    assert resolved == Settings.model_validate(resolved).model_dump()  # the output is itself a valid file
    assert validate(resolved).model_dump() == load_settings(tmp_path / "params.yaml").model_dump()
    shipped = yaml.safe_load(spag("config", "show", ROOT / "params.yaml", "--no-comments").stdout)
    assert shipped == load_settings(ROOT / "params.yaml").model_dump()


# ------------------------------------------------------------------------------------------ the CLI


def _command(command: str):
    import typer

    from spag.cli import app

    return typer.main.get_command(app).commands[command]


def cli_option(command: str, flag: str):
    return next(p for p in _command(command).params if flag in p.opts)


@pytest.mark.parametrize(
    "command, flag, section, name",
    [
        ("play", "--top-k", Play, "top_k"),
        ("train", "--weight-decay", TrainConfig, "weight_decay"),
        ("reward", "--foul-line-penalty", Reward, "foul_line_penalty"),
        ("train", "--clip-range", TrainConfig, "clip_range"),
        ("train", "--lr", TrainConfig, "learning_rate"),
        ("words", "--top", Words, "top"),
    ],
)
def test_cli_options_take_default_and_help_from_the_schema(command, flag, section, name):
    option = cli_option(command, flag)
    field = section.model_fields[name]
    assert option.default == field.default and option.help == field.description
    assert option.show_default


def test_every_setting_of_a_section_is_an_option_of_the_commands_that_take_it():
    """The options are made from the schema: a field added to a section is an option at once."""
    commands = {
        "train": [TrainConfig],
        "reward": [Reward],
        "play": [Sampling, TabooSettings, TabooStrategies],
        "words": [Words],
    }
    for command, sections in commands.items():
        for section in sections:
            for name, field in section.model_fields.items():
                if name == "name" or name == "show_progress" or cli_type(field.annotation) is None:
                    continue
                assert cli_option(command, "--" + name.replace("_", "-")) or True, (command, name)
                opts = [o for p in _command(command).params for o in p.opts]
                assert any(o == "--" + name.replace("_", "-") for o in opts) or name == "learning_rate", (
                    command,
                    name,
                    opts,
                )


def test_a_game_setting_on_the_command_line_defaults_to_the_games_and_belongs_to_it(tmp_path):
    option = cli_option("play", "--max-turns")
    assert option.default is None and "Default: the game's." in option.help
    (tmp_path / "w.txt").write_text("apple\n")
    result = run_cli(
        "play",
        "--attacker",
        "x",
        "--defender",
        "x",
        "--words",
        str(tmp_path / "w.txt"),
        "-o",
        str(tmp_path / "out"),
        "--game",
        "chess",
    )
    assert result.code == 2 and result.error_lines() == [
        "error: --game: 'chess' is not one of taboo, kuhn-poker"
    ]
    result = run_cli(
        "play",
        "--attacker",
        "x",
        "--defender",
        "x",
        "--words",
        str(tmp_path / "w.txt"),
        "-o",
        str(tmp_path / "out"),
        "--game",
        "kuhn-poker",
        "--rules",
        "original",
    )
    assert result.code == 2 and result.error_lines() == [
        "error: --rules: the game kuhn-poker has no such setting"
    ]


def test_cli_help_shows_the_schemas_default():
    result = run_cli("words", "--help")
    assert result.code == 0
    assert f"[default: {Words().top}]" in result.stdout and "[default: 0.1]" in result.stdout


def test_cli_values_are_checked_by_the_schema(tmp_path):
    (tmp_path / "e.json").write_text("[]")
    result = run_cli("reward", str(tmp_path / "e.json"), "-o", str(tmp_path / "r.jsonl"), "--decay", "0")
    assert result.code == 2
    assert result.error_lines() == ["error: --decay: must be > 0, got 0.0"]
    result = run_cli(
        "reward", str(tmp_path / "e.json"), "-o", str(tmp_path / "r.jsonl"), "--loser-reward", "0.5"
    )
    assert result.code == 2 and len(result.error_lines()) == 1 and "--loser-reward" in result.error_lines()[0]


# --------------------------------------------------------------------- the stages and their declared params


def declared_in_dvc_yaml() -> dict[str, list[str]]:
    stages = load("dvc.yaml")["stages"]
    return {name: (stage.get("do", stage)).get("params", []) for name, stage in stages.items()}


def test_dvc_yaml_declares_exactly_the_params_each_stage_reads():
    """dvc.yaml is written from the stage table (tests/test_cli_errors.py checks it is current): each
    stage's params there are the keys its view of the settings lets it read."""
    dvc = declared_in_dvc_yaml()
    assert set(dvc) == set(STAGE_PARAMS)
    for name, keys in STAGE_PARAMS.items():
        assert dvc[name] == [key.replace("{epoch}", "${key}") for key in keys], name


def test_every_declared_key_exists_in_the_schema():
    settings = Settings().model_dump()
    for name in STAGE_PARAMS:
        for key in declared_params(name, epoch="1"):
            node = settings
            for part in key.split("."):
                assert part in node, f"{name}: {key}"
                node = node[part]


@pytest.mark.parametrize("name", ["params.yaml", "configs/paper.yaml"])
def test_a_whole_params_file_sets_every_key_a_stage_tracks(name):
    """DVC refuses to run a stage whose declared params are missing from params.yaml: a whole params file
    sets each one (a knob added to a section a stage tracks by key needs its line here too)."""
    params = load(name)
    for stage in STAGE_PARAMS:
        for key in declared_params(stage, epoch="1"):
            node = params
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, (
                    f"{name}: {key} (tracked by {stage}) is not set"
                )
                node = node[part]


def test_a_renamed_setting_is_refused_naming_its_new_key(tmp_path):
    for old, new in RENAMED.items():
        section, key = old.split(".")
        params = tmp_path / "params.yaml"
        params.write_text(f"{section}:\n  {key}: 1.0\n")
        with pytest.raises(ParamsError, match=rf"^{params}: {old}: renamed: use {new}$"):
            load_settings(params)
        override = tmp_path / "override.yaml"
        override.write_text(f"{old}: 1.0\n")
        with pytest.raises(ParamsError, match=rf"^{override}: {old}: renamed: use {new}$"):
            load_settings(None, [override])
    result = run_cli("reward", "x.jsonl", "-o", str(tmp_path / "rows.parquet"), "--foul-penalty", "1")
    assert result.code == 2 and "--foul-line-penalty" in result.error_lines()[0]
    assert len(result.error_lines()) == 1


def test_every_backend_option_is_a_setting_an_option_of_spag_play_and_a_player_option():
    """A backend's options are defined once (spag.players.options): the sampling sections of a params file,
    `spag play`'s options, what a section hands load_player and what the evaluation stages track follow."""
    play_flags = {o for p in _command("play").params for o in p.opts}
    for backend, options in BACKEND_OPTIONS.items():
        assert set(options.model_fields) == set(Sampling().player_options(backend))
        for name, field in options.model_fields.items():
            assert Sampling.model_fields[name].default == field.default, name
            assert "--" + name.replace("_", "-") in play_flags, name
    tracked = set(declared_params("baselines"))
    assert {f"evaluate.{name}" for name in HFOptions.model_fields} <= tracked  # the skill metrics run on hf
    assert BACKENDS == tuple(BACKEND_OPTIONS) and Sampling.model_fields["backend"].description.endswith(
        "hf, vllm, openai."
    )


def test_load_player_checks_options_against_its_backends_schema():
    with pytest.raises(ValueError, match="the hf backend takes no option base_url"):
        load_player("x", "hf", base_url="http://localhost:1/v1")
    with pytest.raises(ValueError, match="prefix_cache_gb: Input should be greater than or equal to 0"):
        load_player("x", "hf", prefix_cache_gb=-1)
    with pytest.raises(ValueError, match="api: Input should be 'chat' or 'completions'"):
        load_player("m", "openai", api="rest")


def test_training_stages_track_every_training_knob():
    # deepspeed and launcher included: changing them makes train@N (and imitate) stale
    for name, section in (("train", "spag"), ("imitate", "imitate")):
        keys = set(STAGE_PARAMS[name])
        assert {f"{section}.{k}" for k in TrainStep.model_fields} <= keys
        assert {f"{section}.deepspeed", f"{section}.launcher"} <= keys


def test_a_stage_cannot_read_a_key_it_does_not_declare():
    view = Declared(Settings(), frozenset(declared_params("reward", "2")), "reward")
    assert view.reward.decay == Settings().reward.decay and view.spag.control is False
    assert view.game.rules == "whole-word"
    with pytest.raises(UndeclaredParam, match="stage reward reads spag.learning_rate"):
        view.spag.learning_rate
    with pytest.raises(UndeclaredParam, match="reads evaluate, which"):
        view.evaluate.words
    words = Declared(Settings(), frozenset(declared_params("words")), "words")
    assert words.game.name == "taboo"  # which game's targets: its name, and none of its settings
    with pytest.raises(UndeclaredParam, match="reads game.max_turns"):
        words.game.max_turns
    train = Declared(Settings(), frozenset(declared_params("train", "2")), "train")
    assert train.spag.epochs["2"].previous == "epoch_1"
    with pytest.raises(UndeclaredParam, match="reads spag.epochs.1"):
        train.spag.epochs["1"]
    assert {k for k in TrainKnobs.model_fields if getattr(train.spag, k) is not None}


def test_a_stage_started_on_a_params_file_with_a_typo_exits_2_naming_the_key(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(ROOT / "stages", project / "stages")
    p = load("params.yaml")
    p["spag"]["kl_coef"] = p["spag"].pop("kl_coeff")
    (project / "params.yaml").write_text(yaml.safe_dump(p))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for stage in (["words.py"], ["reward.py", "1"]):  # the typo is in a section neither stage reads
        result = subprocess.run(
            [sys.executable, f"stages/{stage[0]}", *stage[1:]],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2, result.stderr
        assert (
            result.stderr.strip() == "error: params.yaml: spag.kl_coef: unknown key (did you mean kl_coeff?)"
        )
    assert not (project / "data").exists()


@pytest.mark.slow
def test_under_a_launcher_the_training_settings_travel_as_a_file(tmp_path):
    import json

    from spag.harness.launch import launch
    from spag.testing import make_tiny_checkpoint
    from spag.train.bookkeeping import read_summary

    tiny = make_tiny_checkpoint(tmp_path / "tiny")
    data = tmp_path / "rows.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"Say {w}.", "completion": w, "kind": "sft"}) + "\n"
            for w in ("one", "two", "three")
        )
    )
    config = TrainConfig(
        max_steps=1,
        batch_size=2,
        grad_accum=1,
        max_length=64,
        learning_rate=1e-3,
        live=False,
        show_progress=False,
        sft_coeff=0.25,
    )
    launch(
        sys.executable, "sft", tiny, data, tmp_path / "out", config
    )  # `python -m spag.harness.launch FILE`
    summary = read_summary(tmp_path / "out")
    assert summary["steps"] == 1 and summary["config"]["sft_coeff"] == 0.25
    assert not list(tmp_path.glob(".*train-job.json"))  # the job file is gone


def test_the_long_laptop_preset_restores_the_whole_evaluation_on_the_default():
    default = load_settings(ROOT / "params.yaml")
    long = load_settings(ROOT / "params.yaml", [ROOT / "configs" / "laptop-long.yaml"])
    assert (
        set(default.evaluate.baselines) < set(long.evaluate.baselines) and len(long.evaluate.baselines) == 4
    )
    assert long.evaluate.vs_baseline and long.evaluate.benchmark.limit > default.evaluate.benchmark.limit
    # nothing but the evaluation changes: the trained models are the default run's
    assert long.model_dump(exclude={"evaluate"}) == default.model_dump(exclude={"evaluate"})


# ------------------------------------------------------------- a command writes only after reading its inputs


def test_config_show_writes_its_output_after_reading_every_input(tmp_path):
    """`spag config show params.yaml --override configs/kuhn-poker.yaml > params.yaml` emptied
    params.yaml before spag read it; -o writes once every input is read, in place when it is one of them."""
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    laptop = load_settings(params)
    done = run_cli("config", "show", params, "--override", ROOT / "configs" / "kuhn-poker.yaml", "-o", params)
    assert done.code == 0, done.stderr
    assert done.stdout == ""
    kuhn = load_settings(params)
    assert kuhn.game.name == "kuhn-poker" and kuhn.play.words == 96  # the preset's
    assert kuhn.words.top == laptop.words.top != Words().top  # the laptop values kept, not the schema's
    # another file that exists is replaced only with --overwrite
    other = tmp_path / "notes.yaml"
    other.write_text("mine: 1\n")
    refused = run_cli("config", "show", params, "-o", other)
    assert refused.code == 2 and other.read_text() == "mine: 1\n"
    assert refused.error_lines() == [
        f"error: {other}: exists: pass --overwrite to replace a file spag wrote, or choose a new path (-o)"
    ]
    assert run_cli("config", "show", params, "-o", other, "--overwrite").code == 0
    assert load_settings(other).model_dump() == kuhn.model_dump()


def test_an_empty_params_or_override_file_is_refused(tmp_path):
    """An emptied params.yaml read as "all defaults" (50,000 words, grad_accum 8, ...), exit 0."""
    empty = tmp_path / "params.yaml"
    empty.write_text("# nothing but a comment\n")
    with pytest.raises(ParamsError, match=rf"^{empty}: is empty: a params file sets at least one section"):
        load_settings(empty)
    checked = run_cli("config", "check", empty)
    assert checked.code == 2 and len(checked.error_lines()) == 1 and "is empty" in checked.stderr
    override = tmp_path / "override.yaml"
    override.write_text("")
    with pytest.raises(ParamsError, match=rf"^{override}: is empty: an override file sets at least one"):
        load_settings(ROOT / "params.yaml", [override])
    shown = run_cli(
        "config", "show", ROOT / "params.yaml", "--override", override, "-o", tmp_path / "out.yaml"
    )
    assert shown.code == 2 and not (tmp_path / "out.yaml").exists()


def _online(tmp_path, *lines) -> Path:
    override = tmp_path / "override.yaml"
    override.write_text("".join(f"{line}\n" for line in lines))
    return override


def test_a_conflict_names_each_key_and_the_file_that_set_it(tmp_path):
    """Online.words: 1 in an override (words_per_step 2 in params.yaml) was told as params.yaml's
    spag.warmup_ratio, and with warmup_ratio 0 accepted, to fail at train@N: no optimiser step."""
    params = tmp_path / "params.yaml"
    params.write_text((ROOT / "params.yaml").read_text().replace("  method: offline-po", "  method: online"))
    override = _online(tmp_path, "online.words: 1")
    with pytest.raises(ParamsError) as caught:
        load_settings(params, [override])
    assert str(caught.value) == (
        f"{override}: online.words: 1 word(s) at online.words_per_step 2 give an online "
        f"epoch no optimiser step: set online.words to at least 2 (online.words_per_step "
        f"from {params})"
    )
    with pytest.raises(ParamsError, match=r"online.words: 1 word\(s\) at online.words_per_step 2 give"):
        load_settings(params, [_online(tmp_path, "online.words: 1", "spag.warmup_ratio: 0")])
    with pytest.raises(ParamsError) as caught:
        load_settings(params, [_online(tmp_path, "online.words: 2")])
    assert str(caught.value).startswith(f"{params}: spag.warmup_ratio: 0.03 warms up over all 1 step(s)")
    assert str(caught.value).endswith(
        f"so its learning rate stays 0; set it to 0 or train on more words (online.words from {override})"
    )


def test_a_reply_that_names_the_card_needs_room_in_every_section_that_samples(tmp_path):
    """`game.say_card: true` over the Kuhn preset's max_new_tokens 8 cut every reply before its action, so
    every move was a rule break; now the first section short of room is named, with the file that set it."""
    preset = ROOT / "configs" / "kuhn-poker.yaml"
    say_card = _online(tmp_path, "game.say_card: true")
    load_settings(ROOT / "params.yaml", [preset])  # plain replies fit in 8 tokens
    with pytest.raises(ParamsError) as caught:
        load_settings(ROOT / "params.yaml", [preset, say_card])
    assert "teacher.max_new_tokens: 8 cuts every reply short" in str(caught.value)
    assert "need at least 12 new tokens a reply" in str(caught.value)
    assert str(preset) in str(caught.value)
    roomy = tmp_path / "roomy.yaml"
    roomy.write_text("".join(f"{s}.max_new_tokens: 12\n" for s in ("teacher", "play", "evaluate")))
    settings = load_settings(ROOT / "params.yaml", [preset, say_card, roomy])
    assert settings.game.say_card and settings.play.max_new_tokens == 12
    for short in ("play", "evaluate"):
        one_short = tmp_path / f"{short}.yaml"
        one_short.write_text(f"{short}.max_new_tokens: 11\n")
        with pytest.raises(ParamsError, match=rf"{short}.max_new_tokens: 11 cuts every reply short"):
            load_settings(ROOT / "params.yaml", [preset, say_card, roomy, one_short])


def test_every_problem_of_a_game_switched_by_an_override_is_listed(tmp_path):
    """`game.name: kuhn-poker` over the Taboo settings said "(and 5 more problems)" and listed none."""
    override = _online(tmp_path, "game.name: kuhn-poker")
    with pytest.raises(ParamsError) as caught:
        load_settings(ROOT / "params.yaml", [override])
    params = f"{ROOT / 'params.yaml'}: "
    assert str(caught.value).startswith(params)  # named once: every problem is that file's
    told = str(caught.value).removeprefix(params).split("; ")
    from spag.game.registry import game_class

    taboo = set(load("params.yaml")["game"]) - set(game_class("kuhn-poker").Settings.model_fields)
    assert len(told) == len(taboo) and "more problem" not in str(caught.value)
    for key, line in zip(sorted(taboo), sorted(told)):
        assert line.startswith(f"game.{key}: unknown key")
        assert line.endswith(f"(game.name from {override})")


def test_a_training_step_of_no_epochs_is_refused():
    """0 epochs gave a training stage no optimiser step, found only when it ran."""
    for section, key in (("imitate", "epochs"), ("spag", "epochs_per_iteration")):
        p = load("params.yaml")
        p[section][key] = 0
        assert error_of(p) == f"params.yaml: {section}.{key}: must be > 0, got 0"


def test_config_check_names_an_unknown_benchmark_task(tmp_path):
    """`spag config check` called a file with an unknown benchmark task valid."""
    params = tmp_path / "params.yaml"
    params.write_text(
        (ROOT / "params.yaml")
        .read_text()
        .replace("tasks: [arc_easy, piqa, hellaswag]", "tasks: [arc_easy, no_such_task]")
    )
    checked = run_cli("config", "check", params)
    assert checked.code == 2
    assert checked.error_lines() == [
        f"error: {params}: evaluate.benchmark.tasks: unknown lm-eval task 'no_such_task'"
    ]


def test_spag_prints_its_version():
    from spag import __version__

    shown = spag("--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"spag {__version__}"


def test_every_module_spag_imports_is_declared():
    """deptry (pyproject's [tool.deptry]): an import that pyproject.toml does not declare fails here and in
    `make lint`, as scipy, nltk, datasets, huggingface_hub, tokenizers, py-cpuinfo and nvidia-ml-py once did."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "deptry"), "spag"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_every_game_card_says_what_its_game_class_does():
    """The settings are validated from the cards (spag.game.cards), the games played from their classes: both
    tell the same game."""
    from spag.game.cards import CARDS
    from spag.game.registry import GAMES
    from spag.game.targets import TARGETS

    assert set(CARDS) == set(GAMES) == set(TARGETS)
    for name, card in CARDS.items():
        game = GAMES[name]
        assert (card.name, card.title, card.Settings, card.Strategies) == (
            game.name,
            game.title,
            game.Settings,
            game.Strategies,
        )
        assert (card.few_targets, card.for_chips, card.skill) == (
            game.few_targets,
            game.for_chips,
            game.skill is not None,
        )
        assert card.baselines == (tuple(game.skill.baselines) if game.skill is not None else ())
    from spag.game.kuhn import TEACHERS
    from spag.game.kuhn.card import TABLES

    assert set(TABLES) == set(TEACHERS)  # a knob per teacher's table
    assert set(CARDS["kuhn-poker"].Strategies.model_fields) == {*TEACHERS, "explore"}
    kuhn = GAMES["kuhn-poker"]()
    assert TARGETS["kuhn-poker"](None) == kuhn.targets(None) == ["J-Q", "J-K", "Q-J", "Q-K", "K-J", "K-Q"]
