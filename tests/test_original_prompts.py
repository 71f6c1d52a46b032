"""Paper mode, line for line: the original's prompts, replies, game end, general rows and truncation.

The expectations are the original code's behaviour written out from its description (Linear95/SPAG:
``utils.py``, ``tools/play_llm_game.py``, ``tools/assign_rewards.py``, ``dataloaders.py``), not its code.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from spag.game.taboo import Taboo
from spag.game.taboo.card import TabooSettings
from spag.game.taboo.original_prompts import play_query, row_query, texts
from spag.game.taboo.outcomes import ATTACKER_BREAKS_RULES, TIE
from spag.game.taboo.prompts import build_prompt
from spag.models.chat import RawPrompt, model_input_ids, to_model_input
from spag.play.engine import PlayConfig, play_games
from spag.players import Reply

ROOT = Path(__file__).resolve().parent.parent
HISTORY = [{"role": "attacker", "content": "Think of orchards."}, {"role": "defender", "content": " Trees? "}]
# The original's closing instructions (its INSTRUCT_PROMPTS and PLAYER_INSTRUCT_PROMPTS), spelt out.
PLAY_ATTACKER = (
    "\n\n### Instruction: You are the attacker. The target word is `apple`. Provide your response "
    "for the next turn.\n\n### Response:"
)
PLAY_DEFENDER = "\n\n### Instruction: Your are the defender. Provide your response to infer the target word.\n\n### Response:"
ROW_INSTRUCTION = {
    "attacker": "You are the attacker. The target word is `apple`. Provide your response for the next turn.",
    "defender": "Your are the defender. Provide your response to infer the target word.",
}


def spag(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "spag.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


# ------------------------------------------------------------------------------------------ the texts


def test_the_original_texts():
    rules = texts()["rules"]
    assert len(rules) == 8
    assert rules[0].startswith("Play the game of Adversarial Taboo. In this game, there are two players")
    assert rules[0].endswith(
        "The game has {max_turns} turns. if nobody wins during {max_turns} turns, there is a tie.\n"
    )
    assert all(text.startswith("\n") for text in rules[1:])  # the paraphrases open with a newline
    assert "four rounds" in rules[6] and "{max_turns}" not in rules[6]  # "four" whatever max_turns is
    assert sum("{max_turns}" in text for text in rules) == 7


def test_play_prompt_is_the_originals():
    rules = texts()["rules"][0].format(max_turns=5)
    assert play_query([], "apple", 5) == rules + "The game is just initialized." + PLAY_ATTACKER
    assert play_query(HISTORY[:1], "apple", 5) == (
        rules + "\n### Game History:\n  - attacker: Think of orchards." + PLAY_DEFENDER
    )
    assert play_query(HISTORY, "apple", 5) == (
        rules
        + "\n### Game History:\n  - attacker: Think of orchards.\n  - defender:  Trees? "
        + PLAY_ATTACKER
    )
    assert isinstance(play_query([], "apple", 5), RawPrompt)


def original_row_formats(history, target_word="apple", max_turns=5) -> set[str]:
    """Every query the original's randomly_convert_game_history_to_query can give for ``history``."""
    role = "attacker" if len(history) % 2 == 0 else "defender"
    other = "defender" if role == "attacker" else "attacker"
    instruction = ROW_INSTRUCTION[role]
    out = set()
    pairs = [(role, other), ("Assistant", "Human"), ("Answer", "Question"), ("Response", "Query"), ("A", "Q")]
    for rules, prefix, (mine, theirs), system in itertools.product(
        texts()["rules"],
        ["\n - ", "\n### ", "\n## ", "\n# ", "\n *** ", "\n **", "\n\n"],
        pairs,
        ["Rules", "Game Rule", "System"],
    ):
        rules, prefix = rules.format(max_turns=max_turns), "\n" + prefix
        label = {role: mine, other: theirs}
        lines = "".join(f"{prefix}{label[u['role']]}: {u['content']}" for u in history)
        chat_system = f"{prefix}{system}: {rules}\n\n{instruction}" + (
            "" if history else "The game is just initialized. "
        )
        tail = f"{prefix}{mine}: "
        out.add(chat_system + lines + tail)  # chat
        out.add(lines + chat_system + tail)  # chat, history first
        for opening in (rules, f"{system}: {rules}"):  # alpaca: the rules labelled in 20% of the draws
            body = opening + (
                f"{prefix}Game History:{lines}\n\n" if history else "The game is just initialized. "
            )
            out.add(body + instruction[:-1] + ": ")  # 20%: the instruction ends the query
            out.add(body + instruction + tail)
    return out


@pytest.mark.parametrize("turn", [0, 1, 2])
def test_row_queries_are_drawn_from_exactly_the_originals_formats(turn):
    history = HISTORY[:turn]
    formats = original_row_formats(history)
    rng = random.Random(7)
    drawn = [row_query(history, "apple", 5, rng) for _ in range(3000)]
    assert all(isinstance(q, RawPrompt) for q in drawn)
    assert set(drawn) <= formats
    # every rules text, line prefix and layout turns up
    assert all(any(text.format(max_turns=5) in q for q in drawn) for text in texts()["rules"])
    assert (
        sum(q.endswith(ROW_INSTRUCTION[("attacker", "defender")[turn % 2]][:-1] + ": ") for q in drawn) > 100
    )
    assert len(set(drawn)) > 1000
    # seeded: the same generator state gives the same queries
    again = random.Random(7)
    assert [row_query(history, "apple", 5, again) for _ in range(50)] == drawn[:50]


# ------------------------------------------------------------------------------------------ rendering


def test_a_raw_prompt_is_bos_and_its_tokens_and_long_prompts_are_cut_from_the_left():
    from spag.testing import build_tiny_tokenizer

    tok = build_tiny_tokenizer(chat_template=True)
    query = play_query(HISTORY, "apple", 5)
    ids = model_input_ids(tok, query)
    assert to_model_input(tok, query) == str(query)  # no chat template around it
    assert ids == [tok.bos_token_id] + tok(str(query), add_special_tokens=False)["input_ids"]
    assert model_input_ids(tok, query, max_tokens=30) == ids[-30:]
    templated = build_prompt("attacker", "apple", HISTORY, 5)
    assert model_input_ids(tok, templated, max_tokens=10) == model_input_ids(tok, templated)[-10:]


# ------------------------------------------------------------------------------------ play in paper mode


class ScriptedPlayer:
    """Says its lines in order, whatever it is asked; remembers the prompts and stop strings it was given."""

    name = "scripted"

    def __init__(self, attacker_lines, defender_lines):
        self.lines = {"attacker": list(attacker_lines), "defender": list(defender_lines)}
        self.prompts, self.stops = [], []

    def generate(self, prompts, stop=(), **_):
        self.stops.append(tuple(stop))
        replies = []
        for prompt in prompts:
            self.prompts.append(prompt)
            role = "attacker" if "You are the attacker" in prompt else "defender"
            replies.append(Reply(self.lines[role].pop(0), 3))
        return replies


PAPER = dict(
    play_prompts="original",
    replies="raw",
    end="guess-phrase",
    rules="original",
    empty_retries=0,
    min_new_tokens=0,
)


def test_paper_play_asks_the_original_prompt_and_keeps_the_reply_as_it_is():
    player = ScriptedPlayer(
        [" Attacker: orchards \ndefender: a fruit?", "x", "y"], ["I know the word! It is apple", "b", "c"]
    )
    (episode,) = play_games(
        player, player, ["apple"], PlayConfig.of(max_turns=3, **PAPER), show_progress=False
    )
    assert player.prompts[0] == play_query([], "apple", 3) and isinstance(player.prompts[0], RawPrompt)
    assert player.stops[0] == ()  # no cut at another speaker's line
    assert episode["history"][0]["content"] == " Attacker: orchards \ndefender: a fruit?"  # as it came
    assert (episode["outcome"], episode["turns"]) == ("defender_wins", 2)
    recorded = json.loads(episode["game_settings"])
    assert (recorded["play_prompts"], recorded["replies"], recorded["end"]) == (
        "original",
        "raw",
        "guess-phrase",
    )
    # this project's default cleans the same reply
    player = ScriptedPlayer([" Attacker: orchards \ndefender: a fruit?", "x", "y"], ["hm", "b", "c"])
    (episode,) = play_games(player, player, ["apple"], PlayConfig.of(max_turns=3), show_progress=False)
    assert episode["history"][0]["content"] == "orchards" and player.stops[0]


def test_the_guess_phrase_ends_a_game_where_the_judge_has_not_decided():
    # "I know the word." is no guess to the judge (no "! it ..." window): the original stops the game there
    # and judges a tie; stopping only when the judge decides plays on, and the defender wins later.
    attacker = ["Think of orchards.", "Red or green.", "Crunchy."]
    defender = ["I know the word.", "Hm.", "I know the word! It is apple"]
    original = play_games(
        *[ScriptedPlayer(attacker, defender)] * 2,
        ["apple"],
        PlayConfig.of(max_turns=3, end="guess-phrase", rules="original"),
        show_progress=False,
    )[0]
    ours = play_games(
        *[ScriptedPlayer(attacker, defender)] * 2,
        ["apple"],
        PlayConfig.of(max_turns=3, rules="original"),
        show_progress=False,
    )[0]
    assert (len(original["history"]), original["outcome"]) == (2, TIE)
    assert (len(ours["history"]), ours["outcome"]) == (6, "defender_wins")


def test_under_the_guess_phrase_rule_a_foul_is_played_on_and_judged_afterwards():
    attacker = ["An apple a day.", "Fruit.", "Red."]
    defender = ["Doctor?", "Pear?", "Plum?"]
    (episode,) = play_games(
        *[ScriptedPlayer(attacker, defender)] * 2,
        ["apple"],
        PlayConfig.of(max_turns=3, end="guess-phrase", rules="original"),
        show_progress=False,
    )
    assert len(episode["history"]) == 6  # all turns played, as the original's play script did
    assert (episode["outcome"], episode["turns"]) == (ATTACKER_BREAKS_RULES, 1)  # judged on the first line


# ------------------------------------------------------------------------------------------ rows


def test_paper_rows_carry_the_originals_query_formats_and_stripped_targets():
    from spag.rewards.build import reward_rows

    episode = {
        "target_word": "apple",
        "max_turns": 5,
        "history": [
            {"role": "attacker", "content": " Think of orchards. "},
            {"role": "defender", "content": " Trees? "},
            {"role": "attacker", "content": "Red fruit. "},
            {"role": "defender", "content": "I know the word! It is apple"},
        ],
    }
    rows, _ = reward_rows(
        [episode], seed=3, game=Taboo(TabooSettings(rules="original", row_prompts="original"))
    )
    assert [r["turn"] for r in rows] == [1, 3] and all(r["raw_prompt"] for r in rows)
    assert rows[0]["prompt"] in original_row_formats(episode["history"][:1])
    assert rows[1]["prompt"] in original_row_formats(episode["history"][:3])
    assert rows[0]["completion"] == "Trees?" and rows[0]["history_bounds"] is None
    again, _ = reward_rows(
        [episode], seed=3, game=Taboo(TabooSettings(rules="original", row_prompts="original"))
    )
    assert [r["prompt"] for r in again] == [r["prompt"] for r in rows]


def test_general_rows_in_the_originals_format():
    from spag.rewards.sft import sft_rows

    records = [
        {"instruction": "Add 2 and 3.", "input": "", "output": "5"},
        {"instruction": "Translate.", "input": "chat", "output": ""},
        {"query": "Q: hi\nA:", "target": " hello"},
    ]
    rows = sft_rows(records, sft_format="original")
    assert [r["prompt"] for r in rows] == [
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\nAdd 2 and 3.\n\n### Response:",
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n### Instruction:\nTranslate.\n\n"
        "### Input:\nchat\n\n### Response:",
        "Q: hi\nA:",
    ]
    assert [r["completion"] for r in rows] == ["5", "", " hello"]  # kept as they are, the empty one too
    assert all(r["raw_prompt"] and r["weight"] == 1.0 and r["kind"] == "sft" for r in rows)
    # this project's format leaves the empty output out and wraps the rest in the chat template
    ours = sft_rows(records, errors=[])
    assert [r["prompt"] for r in ours] == ["Add 2 and 3.", "Q: hi\nA:"] and not any(
        "raw_prompt" in r for r in ours
    )


def test_left_truncation_keeps_the_last_max_length_tokens():
    from spag.rewards.rows import validate_row
    from spag.testing import build_tiny_tokenizer
    from spag.train.data import encode_rows

    tok = build_tiny_tokenizer(chat_template=True)
    row = validate_row(
        {
            "prompt": str(play_query(HISTORY, "apple", 5)),
            "completion": "Apple pie.",
            "raw_prompt": True,
            "reward": 1.0,
        },
        0,
    )
    full = encode_rows([row], tok, 4096, show_progress=False)
    n = len(full.input_ids[0])
    cut = encode_rows([row], tok, n - 40, show_progress=False, truncation="left")
    assert cut.input_ids[0] == full.input_ids[0][40:] and cut.rows_cut_left == 1
    assert cut.completion_lengths == full.completion_lengths  # the target is whole
    tiny = encode_rows([row], tok, 3, show_progress=False, truncation="left")
    assert tiny.input_ids[0] == full.input_ids[0][-3:] and tiny.completion_lengths == [3]
    # this project's default has no history lines to give up in a raw prompt: the row is left out
    assert encode_rows([row], tok, n - 40, show_progress=False).rows_too_long == 1


# ------------------------------------------------------------------------------------------ commands


def test_spag_prompt_under_the_paper_preset_gives_the_originals_play_prompts(tmp_path):
    states = tmp_path / "states.jsonl"
    states.write_text(
        "\n".join(
            json.dumps(s)
            for s in [
                {"id": "a", "target_word": "apple", "max_turns": 5, "history": []},
                {"id": "b", "target_word": "apple", "max_turns": 3, "history": HISTORY[:1]},
            ]
        )
        + "\n"
    )
    out = tmp_path / "prompts.jsonl"
    result = spag("prompt", states, "--params", ROOT / "configs" / "paper.yaml", "-o", out)
    assert result.returncode == 0, result.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    rules = texts()["rules"][0]
    assert got == [
        {
            "id": "a",
            "role": "attacker",
            "prompt": rules.format(max_turns=5) + "The game is just initialized." + PLAY_ATTACKER,
        },
        {
            "id": "b",
            "role": "defender",
            "prompt": rules.format(max_turns=3)
            + "\n### Game History:\n  - attacker: Think of orchards."
            + PLAY_DEFENDER,
        },
    ]
    assert "2 prompts of taboo" in result.stderr


@pytest.mark.slow
def test_spag_prompt_with_templates_renders_the_models_chat_template(tmp_path):
    from spag.config import load_settings
    from spag.models.loading import load_tokenizer
    from spag.testing import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "model")
    states = tmp_path / "states.jsonl"
    states.write_text(json.dumps({"id": 1, "target_word": "apple", "history": HISTORY}) + "\n")
    out = tmp_path / "prompts.jsonl"
    result = spag("prompt", states, "--params", ROOT / "params.yaml", "--model", model, "-o", out)
    assert result.returncode == 0, result.stderr
    (got,) = [json.loads(line) for line in out.read_text().splitlines()]
    max_turns = load_settings(ROOT / "params.yaml").game.max_turns  # a record without max_turns: the params'
    expected = to_model_input(load_tokenizer(model), build_prompt("attacker", "apple", HISTORY, max_turns))
    assert got == {"id": 1, "role": "attacker", "prompt": expected} and expected.startswith("<|start|>user\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "target_word": "apple", "history": [HISTORY[1]]}) + "\n")
    result = spag(
        "prompt", bad, "--params", ROOT / "params.yaml", "--model", model, "-o", tmp_path / "more.jsonl"
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "bad.jsonl" in result.stderr


@pytest.mark.slow
def test_spag_reward_takes_its_settings_from_a_params_file(tmp_path):
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(
        json.dumps(
            {
                "target_word": "apple",
                "max_turns": 5,
                "history": [
                    {"role": "attacker", "content": "Red fruit."},
                    {"role": "defender", "content": "I know the word! It is apple"},
                ],
            }
        )
        + "\n"
    )
    alpaca = tmp_path / "alpaca.json"
    alpaca.write_text(json.dumps([{"instruction": "Say hi.", "input": "", "output": ""}]))
    params = tmp_path / "params.yaml"
    paper = (ROOT / "configs" / "paper.yaml").read_text().replace("data/alpaca_data.json", str(alpaca))
    params.write_text(paper)
    out = tmp_path / "rows.jsonl"
    result = spag("reward", episodes, "--params", params, "-o", out)
    assert result.returncode == 0, result.stderr
    game, general = [json.loads(line) for line in out.read_text().splitlines()]
    assert game["raw_prompt"] and game["prompt"] in original_row_formats(
        [{"role": "attacker", "content": "Red fruit."}]
    )
    assert general["prompt"].startswith("Below is an instruction") and general["completion"] == ""
    # an option given on the command line wins over the file
    result = spag(
        "reward",
        episodes,
        "--params",
        params,
        "--row-prompts",
        "templates",
        "--sft-format",
        "chat",
        "--sft",
        "builtin",
        "--sft-limit",
        "1",
        "-o",
        out,
        "--overwrite",
    )
    assert result.returncode == 0, result.stderr
    game = json.loads(out.read_text().splitlines()[0])
    assert "raw_prompt" not in game and game["history_bounds"]
    result = spag("reward", episodes, "--params", tmp_path / "missing.yaml", "-o", out, "--overwrite")
    assert result.returncode == 2 and "missing.yaml" in result.stderr
