"""Paper mode: the switches that restore the original code's behaviour, through the library and the stages."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spag.config import REDUCTIONS, Imitate, Settings, validate
from spag.game.taboo import Taboo
from spag.game.taboo.card import TabooSettings, TabooStrategies
from spag.game.taboo.outcomes import ATTACKER_BREAKS_RULES, TIE
from spag.play.engine import PlayConfig, play_games
from spag.players import Reply
from spag.players.options import BACKEND_OPTIONS
from spag.rewards.build import build_imitation_set, reward_rows
from spag.runtime.errors import ParamsError

ROOT = Path(__file__).resolve().parent.parent
SEED_WORDS = (
    Path(__file__).resolve().parents[2] / "shared" / "seed-data" / "all_target_words.txt"
)  # ../shared


def load(name):
    return yaml.safe_load((ROOT / name).read_text())


# ------------------------------------------------------------------------------------------ params


def test_reductions_of_the_params_check_are_the_losses():
    from spag.train.losses import REDUCTIONS as LOSS_REDUCTIONS

    assert REDUCTIONS == LOSS_REDUCTIONS


def check_params(p, source="params.yaml"):
    return validate(p, source).model_dump()


def test_default_params_keep_this_projects_behaviour():
    p = check_params(load("params.yaml"))
    assert p["game"]["rules"] == "whole-word" and p["game"]["templates"] is None
    assert p["words"]["source"] is None and p["words"]["skip_stop_words"] is True
    assert p["teacher"]["episodes"] is None and p["teacher"]["rows"] is None
    # the imitation set still mixes the general data that reward.sft gave it before imitate.sft existed
    assert (p["imitate"]["sft"], p["imitate"]["sft_limit"]) == ("builtin", 16)
    assert p["imitate"]["lr_scheduler"] == p["spag"]["lr_scheduler"] == "cosine"
    assert p["spag"]["reduction"] == "rows" and p["spag"]["detach_advantage"] is True
    assert (p["game"]["play_prompts"], p["game"]["row_prompts"], p["game"]["replies"], p["game"]["end"]) == (
        "templates",
        "templates",
        "clean",
        "decided",
    )
    assert p["spag"]["truncation"] == "history" and p["spag"]["ref_on_the_fly"] is False


def test_paper_yaml_turns_every_switch_to_the_original():
    p = check_params(load("configs/paper.yaml"), "configs/paper.yaml")
    assert p["game"]["rules"] == "original"
    assert p["spag"]["reduction"] == "rows" and p["spag"]["detach_advantage"] is False
    assert p["imitate"]["lr_scheduler"] == p["spag"]["lr_scheduler"] == "warmup_decay_ds013"
    assert p["imitate"]["sft"] is None
    assert p["words"]["source"].endswith("all_target_words.txt") and p["words"]["skip_stop_words"] is False
    assert p["words"]["nouns_only"] is False
    assert p["teacher"]["episodes"].endswith("gpt4_game_top30k_results.json")
    assert p["reward"]["sft"] is not None  # the original mixes Alpaca into the SPAG set (not imitation)
    # the original's play_llm_game.py: float16 weights, no shortest reply; its training ran with
    # --gradient_checkpointing True
    assert p["play"]["dtype"] == p["evaluate"]["dtype"] == "float16"
    assert (
        p["teacher"]["min_new_tokens"] == p["play"]["min_new_tokens"] == p["evaluate"]["min_new_tokens"] == 0
    )
    assert p["imitate"]["gradient_checkpointing"] is True and p["spag"]["gradient_checkpointing"] is True
    assert p["teacher"]["empty_retries"] == p["play"]["empty_retries"] == p["evaluate"]["empty_retries"] == 0
    # the original's prompts, replies, game end, general rows, truncation and reference (the details:
    # tests/test_original_prompts.py)
    assert (p["game"]["play_prompts"], p["game"]["row_prompts"]) == ("original", "original")
    assert (p["game"]["replies"], p["game"]["end"]) == ("raw", "guess-phrase")
    assert p["reward"]["sft_format"] == p["imitate"]["sft_format"] == "original"
    assert p["play"]["max_prompt_tokens"] == p["evaluate"]["max_prompt_tokens"] == 2048
    assert p["play"]["include_held_out"] is True
    for step in ("imitate", "spag"):
        assert (p[step]["truncation"], p[step]["ref_on_the_fly"], p[step]["max_length"]) == (
            "left",
            True,
            2048,
        )


def keys(tree, prefix=""):
    out = set()
    for key, value in tree.items():
        out.add(prefix + str(key))
        if isinstance(value, dict) and key not in ("epochs", "strategies"):
            out |= keys(value, prefix + str(key) + ".")
    return out


def rules_of(episode: dict) -> str:
    """The judge's rule set an episode records (with the rest of its game's settings)."""
    return json.loads(episode["game_settings"])["rules"]


def test_params_files_write_out_every_setting_but_the_backends_options():
    # Both files write out every setting (so `dvc exp run -S` and a diff of the two show them), but the
    # players' backend options, whose defaults are the schema's (spag.players.options): a file sets those
    # only where a stage tracks them by key (tests/test_config.py). The teacher's strategies are the game's,
    # a mapping the game's strategies section checks.
    options = {name for section in BACKEND_OPTIONS.values() for name in section.model_fields}
    schema = keys(Settings().model_dump())
    written_out = {key for key in schema if key.split(".")[-1] not in options}
    for name in ("params.yaml", "configs/paper.yaml"):
        assert written_out <= keys(load(name)) <= schema, name
    assert set(load("params.yaml")["teacher"]["strategies"]) < set(TabooStrategies.model_fields)


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("game", "rules", "loose", "params.yaml: game.rules: 'loose' is not one of whole-word, original"),
        (
            "spag",
            "lr_scheduler",
            "cosine_restarts",
            "params.yaml: spag.lr_scheduler: 'cosine_restarts' is not one",
        ),
        ("spag", "detach_advantage", "no", "params.yaml: spag.detach_advantage: expected true or false"),
        ("imitate", "sft_limit", -1, "params.yaml: imitate.sft_limit: must be >= 0, got -1"),
        (
            "teacher",
            "rows",
            "rows.json",
            "params.yaml: teacher.episodes: give teacher.episodes or teacher.rows",
        ),
    ],
)
def test_bad_switches_name_the_key(section, key, value, message):
    p = load("params.yaml")
    p[section][key] = value
    if key == "rows":
        p["teacher"]["episodes"] = "episodes.json"
    with pytest.raises(ParamsError) as caught:
        check_params(p)
    assert str(caught.value).startswith(message)


def test_a_left_out_switch_takes_the_schemas_default():
    p = load("params.yaml")
    del p["game"]["rules"]
    assert check_params(p)["game"]["rules"] == "whole-word"


# --------------------------------------------------------------------------- the judge everywhere


class OneLinePlayer:
    """An attacker whose first line says "category" (a substring of "cat") and a defender who chats."""

    name = "one-line"

    def generate(self, prompts, **_):
        return [
            Reply("Think of a category of pets." if "You are the attacker" in p else "Dogs, maybe?", 3)
            for p in prompts
        ]


def test_play_judges_by_the_rules_of_the_config():
    player = OneLinePlayer()
    whole = play_games(player, player, ["cat"], PlayConfig.of(max_turns=2), show_progress=False)[0]
    original = play_games(
        player, player, ["cat"], PlayConfig.of(max_turns=2, rules="original"), show_progress=False
    )[0]
    assert (whole["outcome"], whole["turns"], rules_of(whole)) == (TIE, 4, "whole-word")
    assert (original["outcome"], original["turns"], rules_of(original)) == (
        ATTACKER_BREAKS_RULES,
        1,
        "original",
    )


def test_play_config_rejects_unknown_rules():
    with pytest.raises(ValueError, match="rules: 'loose' is not one of whole-word, original"):
        PlayConfig.of(rules="loose")


EPISODES = [
    # whole-word: the defender's "scatter" does not say "cat" (a tie); original: it does (attacker wins)
    {
        "target_word": "cat",
        "max_turns": 2,
        "history": [
            {"role": "attacker", "content": "What do seeds do in the wind?"},
            {"role": "defender", "content": "They scatter."},
        ],
    },
    # both: a right guess
    {
        "target_word": "apple",
        "max_turns": 2,
        "history": [
            {"role": "attacker", "content": "A red fruit."},
            {"role": "defender", "content": "I know the word! It is apple"},
        ],
    },
]


def test_rewards_follow_the_rules():
    rows, stats = reward_rows(EPISODES)
    assert dict(stats.outcomes) == {"tie": 1, "defender_wins": 1} and {r["role"] for r in rows} == {
        "defender"
    }
    rows, stats = reward_rows(EPISODES, game=Taboo(TabooSettings(rules="original")))
    assert dict(stats.outcomes) == {"attacker_wins": 1, "defender_wins": 1}
    assert [(r["role"], r["target_word"]) for r in rows] == [("attacker", "cat"), ("defender", "apple")]
    assert stats.role_weights == {"attacker": 1.0, "defender": 1.0}


def test_analyze_rules_diff_and_rejudging(tmp_path):
    from spag.analyze import run_query
    from spag.game.episodes import judged, write_episodes

    folder = tmp_path / "data" / "teacher" / "episodes"
    folder.mkdir(parents=True)
    write_episodes(judged(EPISODES, Taboo()), folder / "e.parquet")  # outcomes stored by the whole-word judge
    diff = run_query("rules_diff", str(folder))
    assert [(d["target_word"], d["whole_word_outcome"], d["original_outcome"]) for d in diff] == [
        ("cat", "tie", "attacker_wins")
    ]
    assert json.loads(diff[0]["history"])[1]["content"] == "They scatter."
    stored = run_query("SELECT target_word, outcome FROM episodes ORDER BY target_word", str(folder))
    again = run_query(
        "SELECT target_word, outcome FROM episodes ORDER BY target_word", str(folder), rules="original"
    )
    assert [r["outcome"] for r in stored] == ["defender_wins", "tie"]
    assert [r["outcome"] for r in again] == ["defender_wins", "attacker_wins"]


# ------------------------------------------------------------------------------------- imitation data


def test_imitation_set_mixes_general_data_only_when_asked(tmp_path):
    src = tmp_path / "episodes.json"
    src.write_text(json.dumps(EPISODES))
    stats = build_imitation_set(src, tmp_path / "none.jsonl", Imitate(sft=None))
    assert stats.sft_rows == 0
    assert {json.loads(line)["kind"] for line in (tmp_path / "none.jsonl").read_text().splitlines()} == {
        "game"
    }
    stats = build_imitation_set(src, tmp_path / "mixed.jsonl", Imitate(sft="builtin", sft_limit=3))
    assert stats.sft_rows == 3


# ----------------------------------------------------------------------------------------- the stages


def stage(tmp_path, name, overrides):
    """Run stages/<name>.py in a scratch project whose params.yaml is ours with ``overrides``."""
    project = tmp_path / "project"
    if not (project / "stages").exists():
        shutil.copytree(ROOT / "stages", project / "stages")
    p = load("params.yaml")
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        p[section][key] = value
    (project / "params.yaml").write_text(yaml.safe_dump(p))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, f"stages/{name}.py"], cwd=project, env=env, capture_output=True, text=True
    )
    return result, project


@pytest.mark.skipif(not SEED_WORDS.exists(), reason="the original's word list is not on this machine")
def test_words_stage_reads_the_original_list_in_order(tmp_path):
    from spag.game.words import split_words

    result, project = stage(
        tmp_path,
        "words",
        {
            "words.source": str(SEED_WORDS),
            "words.top": 200,
            "words.nouns_only": False,
            "words.skip_stop_words": False,
        },
    )
    assert result.returncode == 0, result.stderr
    words = (project / "data/words/all.txt").read_text().split()
    assert words == SEED_WORDS.read_text().split()[:200]
    assert words[:3] == ["one", "like", "would"]  # function words kept, frequency order kept
    train, held = split_words(words, 0.1)
    assert (project / "data/words/train.txt").read_text().split() == train
    assert (project / "data/words/eval.txt").read_text().split() == held
    # the split is the same on a second run
    again, _ = stage(
        tmp_path,
        "words",
        {
            "words.source": str(SEED_WORDS),
            "words.top": 200,
            "words.nouns_only": False,
            "words.skip_stop_words": False,
        },
    )
    assert again.returncode == 0 and (project / "data/words/eval.txt").read_text().split() == held
    skipping, _ = stage(
        tmp_path,
        "words",
        {
            "words.source": str(SEED_WORDS),
            "words.top": 200,
            "words.nouns_only": False,
            "words.skip_stop_words": True,
        },
    )
    assert skipping.returncode == 0
    assert "would" not in (project / "data/words/all.txt").read_text().split()


def test_words_stage_with_a_missing_list_stops_with_one_line(tmp_path):
    result, _ = stage(tmp_path, "words", {"words.source": str(tmp_path / "nowhere.txt")})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: params.yaml: words.source: no such file: {tmp_path / 'nowhere.txt'}"
    ]


def test_bad_switch_stops_a_stage_with_one_line(tmp_path):
    result, _ = stage(tmp_path, "words", {"game.rules": "loose"})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: params.yaml: game.rules: 'loose' is not one of whole-word, original"
    )


GPT4_SHAPE = [  # the original results file: target_word, max_turns, history
    {
        "target_word": "cat",
        "max_turns": 5,
        "history": [
            {"role": "attacker", "content": "Seeds in the wind?"},
            {"role": "defender", "content": "They scatter."},
        ],
    },
    {
        "target_word": "apple",
        "max_turns": 5,
        "history": [
            {"role": "attacker", "content": "A red fruit."},
            {"role": "defender", "content": "I know the word! It is apple"},
        ],
    },
    {
        "target_word": "river",
        "max_turns": 5,
        "history": [
            {"role": "attacker", "content": "Water flowing to the sea?"},
            {"role": "defender", "content": "I know the word! It is lake"},
        ],
    },
]


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
@pytest.mark.slow
def test_teacher_episodes_are_imported_judged_and_held_out_words_left_out(tmp_path, fmt):
    from spag.game.episodes import write_episodes
    from spag.runtime.records import read_records

    src = tmp_path / f"gpt4_game_top30k_results.{fmt}"
    write_episodes(GPT4_SHAPE, src)
    project = tmp_path / "project"
    (project / "data/words").mkdir(parents=True)
    (project / "data/words/eval.txt").write_text("river\n")
    result, _ = stage(tmp_path, "teacher_play", {"teacher.episodes": str(src), "game.rules": "original"})
    assert result.returncode == 0, result.stderr
    assert "3 episodes" not in result.stderr and "1 on held-out targets left out" in result.stderr
    imported = read_records(project / "data/teacher/episodes")
    assert [(e["target_word"], e["outcome"], rules_of(e)) for e in imported] == [
        ("cat", "attacker_wins", "original"),
        ("apple", "defender_wins", "original"),
    ]

    result, _ = stage(tmp_path, "imitation_data", {"game.rules": "original", "imitate.sft": None})
    assert result.returncode == 0, result.stderr
    rows = read_records(project / "data/imitation/rows.parquet")
    assert [(r["role"], r["completion"], r["kind"]) for r in rows] == [
        ("attacker", "Seeds in the wind?", "game"),
        ("defender", "I know the word! It is apple", "game"),
    ]


ORIGINAL_QUERY = (
    "Play the game ...\n### Game History:\n  - attacker: A red fruit.\n\n### Instruction: You are "
    "the defender. Provide your response to infer the target word.\n\n### Response:"
)


@pytest.mark.slow
def test_teacher_rows_are_used_as_they_are_with_their_weight(tmp_path):
    from spag.rewards.rows import read_rows
    from spag.runtime.records import read_records
    from spag.testing import build_tiny_tokenizer
    from spag.train.data import encode_rows

    src = tmp_path / "train_imitation_gpt4.json"
    src.write_text(
        json.dumps(
            [
                {"query": ORIGINAL_QUERY, "target": "I know the word! It is apple", "weight": 3.5},
                {
                    "query": "### Instruction: You are the attacker. The target word is `apple`.\n\n### Response:",
                    "target": "A red fruit.",
                },
            ]
        )
    )
    result, project = stage(tmp_path, "teacher_play", {"teacher.rows": str(src)})
    assert result.returncode == 0, result.stderr
    result, _ = stage(tmp_path, "imitation_data", {"imitate.sft": None})
    assert result.returncode == 0, result.stderr
    rows = read_records(project / "data/imitation/rows.parquet")
    assert [(r["prompt"], r["weight"], r["role"], r["raw_prompt"]) for r in rows] == [
        (ORIGINAL_QUERY, 3.5, "defender", True),
        (
            "### Instruction: You are the attacker. The target word is `apple`.\n\n### Response:",
            1.0,
            "attacker",
            True,
        ),
    ]
    # training sees the query as the whole model input, as the original's collator built it: BOS + the
    # query's tokens + the target's + EOS, no chat template around it
    tok = build_tiny_tokenizer(chat_template=True)
    rows = read_rows(project / "data/imitation/rows.parquet")
    encoded = encode_rows(rows, tok, 4096, show_progress=False)
    query_ids = [tok.bos_token_id] + tok(ORIGINAL_QUERY, add_special_tokens=False)["input_ids"]
    target_ids = tok(rows[0]["completion"], add_special_tokens=False)["input_ids"]
    assert encoded.input_ids[0] == query_ids + target_ids + [tok.eos_token_id]
    assert encoded.weights == [3.5, 1.0]


def test_teacher_rows_with_a_bad_weight_stop_with_one_line(tmp_path):
    src = tmp_path / "rows.json"
    src.write_text(json.dumps([{"query": "q", "target": "t", "weight": "heavy"}]))
    result, _ = stage(tmp_path, "teacher_play", {"teacher.rows": str(src)})
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"error: teacher.rows: {src}: record 0: 'weight' must be a number, got 'heavy'"
    )


# ------------------------------------------------------------------------------------------ commands


def spag(*args):
    return subprocess.run([sys.executable, "-m", "spag.cli", *map(str, args)], capture_output=True, text=True)


@pytest.mark.slow
def test_reward_and_imitation_commands_take_the_rules(tmp_path):
    src = tmp_path / "episodes.json"
    src.write_text(json.dumps(EPISODES))
    for command in ("reward", "imitation-data"):
        whole = spag(command, src, "-o", tmp_path / f"{command}-whole.jsonl")
        original = spag(command, src, "-o", tmp_path / f"{command}-original.jsonl", "--rules", "original")
        assert whole.returncode == original.returncode == 0, whole.stderr + original.stderr
        roles = [
            [
                json.loads(line)["role"]
                for line in (tmp_path / f"{command}-{name}.jsonl").read_text().splitlines()
            ]
            for name in ("whole", "original")
        ]
        assert roles == [["defender"], ["attacker", "defender"]], command
        bad = spag(command, src, "-o", tmp_path / "bad.jsonl", "--rules", "loose")
        assert bad.returncode == 2 and "--rules: 'loose' is not one of whole-word, original" in bad.stderr


def test_commands_name_a_bad_templates_file(tmp_path):
    src = tmp_path / "episodes.json"
    src.write_text(json.dumps(EPISODES))
    templates = tmp_path / "t.yaml"
    templates.write_text("parts: [rules]\n")
    result = spag("imitation-data", src, "-o", tmp_path / "rows.jsonl", "--templates", templates)
    assert result.returncode == 2 and f"{templates}: rules: missing" in result.stderr


def test_words_command_reads_a_list_file(tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text("One\nlike\nwould\nriver\none\napple\n")
    out = tmp_path / "words.txt"
    kept = spag("words", "-o", out, "--source", listing, "--top", 4, "--keep-stop-words")
    assert kept.returncode == 0, kept.stderr
    assert out.read_text().split() == ["one", "like", "would", "river"]  # order kept, lower-cased, no repeat
    skipped = spag("words", "-o", out, "--source", listing, "--overwrite")  # its own earlier list
    assert skipped.returncode == 0 and out.read_text().split() == [
        "river",
        "apple",
    ]  # "one", "like", "would": function words
    missing = spag("words", "-o", out, "--source", tmp_path / "nowhere.txt", "--overwrite")
    assert missing.returncode == 2 and "nowhere.txt: no such file" in missing.stderr
