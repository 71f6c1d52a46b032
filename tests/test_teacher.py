"""Teacher strategies: self-censoring, coached clues, foul resampling, the dictionary guess."""

from __future__ import annotations

import json

import pytest
import torch

from spag.game.taboo.outcomes import ATTACKER_BREAKS_RULES, ATTACKER_WINS, DEFENDER, DEFENDER_WINS
from spag.game.taboo.prompts import PLAY_TEMPLATE, build_prompt
from spag.game.taboo.rules import PREDICTION_PHRASE, judge
from spag.game.taboo.strategies import BLANK, DictionaryGuesser, blank_out, coaching_prompt
from spag.game.words import is_noun_only, top_words
from spag.play.engine import PlayConfig, PlayStats, play_games
from spag.players import Reply, load_player
from spag.testing import make_tiny_checkpoint


@pytest.fixture(scope="module")
def player(tmp_path_factory):
    return load_player(
        str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt")), "hf", device="cpu"
    )


# ----------------------------------------------------------------------------------------- blank_out


@pytest.mark.parametrize(
    "text, word, expected",
    [
        (
            "A planet orbits the Sun; planets are big.",
            "planet",
            f"A {BLANK} orbits the Sun; {BLANK} are big.",
        ),
        ("RUNNING and ran, but not a runner", "run", f"{BLANK} and {BLANK}, but not a runner"),
        ("Aterritory is not the word territory", "territory", f"Aterritory is not the word {BLANK}"),
        ("nothing to hide here", "lemon", "nothing to hide here"),
    ],
)
def test_blank_out_removes_every_whole_word_form(text, word, expected):
    out = blank_out(text, word)
    assert out == expected
    assert judge(word, [{"role": "attacker", "content": out}], 3).outcome != ATTACKER_BREAKS_RULES


def test_coaching_prompt_asks_for_something_new_each_turn():
    first = coaching_prompt("planet", [])
    assert '"planet"' in first and "different" not in first
    later = coaching_prompt("planet", ["A big round thing in the sky."])
    assert "A big round thing in the sky." in later and "different" in later


# ------------------------------------------------------------------------------------ foul resampling


class FoulOnce:
    """Attacker says the word on its first try at each turn, then a clean clue; defender never guesses."""

    name = "foul-once"

    def __init__(self):
        self.tries: dict[str, int] = {}

    def generate(
        self,
        prompts,
        *,
        temperature=1.0,
        top_k=0,
        max_new_tokens=256,
        min_new_tokens=1,
        seed=None,
        stop=(),
        stop_pattern=None,
    ):
        out = []
        for prompt in prompts:
            if "You are the attacker" in prompt:
                n = self.tries.get(prompt, 0)
                self.tries[prompt] = n + 1
                out.append(Reply("It is a lemon, obviously." if n == 0 else "Yellow and sour.", 4))
            else:
                out.append(Reply("Hmm, tell me more.", 4))
        return out


def test_foul_retries_resample_an_attacker_line_that_says_the_word():
    stats = PlayStats()
    [episode] = play_games(
        FoulOnce(),
        FoulOnce(),
        ["lemon"],
        PlayConfig.of(max_turns=2, foul_retries=1),
        show_progress=False,
        stats=stats,
    )
    assert [u["content"] for u in episode["history"] if u["role"] == "attacker"] == ["Yellow and sour."] * 2
    assert stats.resampled_fouls == 2 and json.loads(episode["strategies"])["foul_retries"] == 1
    [plain] = play_games(FoulOnce(), FoulOnce(), ["lemon"], PlayConfig.of(max_turns=2), show_progress=False)
    assert plain["outcome"] == ATTACKER_BREAKS_RULES  # without the strategy the foul stands


class Recorder(FoulOnce):
    """FoulOnce that also keeps every prompt it was asked."""

    def __init__(self, name):
        super().__init__()
        self.name, self.prompts = name, []

    def generate(self, prompts, **kwargs):
        self.prompts.extend(prompts)
        return super().generate(prompts, **kwargs)


def test_strategies_wrap_only_the_role_they_change():
    from spag.game.taboo.strategies import CoachedAttacker, FoulRetries
    from spag.play.engine import speakers
    from spag.players.base import Speaker

    config = PlayConfig.of(max_turns=2, coached_attacker=True, foul_retries=1)
    attacker, defender = Recorder("a"), Recorder("d")
    a, d = speakers(attacker, defender, config)
    assert isinstance(a, FoulRetries) and isinstance(a.inner, CoachedAttacker) and type(d) is Speaker
    shared_a, shared_d = speakers(attacker, attacker, config)
    assert shared_a is shared_d  # one player, one speaker: both roles' turns go in one batch
    [episode] = play_games(attacker, defender, ["lemon"], config, show_progress=False)
    # The attacker is coached (asked to describe its word), the defender gets the game's own prompt.
    assert attacker.prompts and all(p.startswith('Describe the word "lemon"') for p in attacker.prompts)
    assert defender.prompts and all("You are the defender" in p for p in defender.prompts)
    assert [u["role"] for u in episode["history"]] == ["attacker", "defender"] * 2


def test_final_guess_needs_a_model_backend():
    with pytest.raises(ValueError, match="hf or vllm backend"):
        play_games(
            FoulOnce(),
            FoulOnce(),
            ["lemon"],
            PlayConfig.of(max_turns=2, final_guess=True),
            guess_words=["lemon", "lime"],
            show_progress=False,
        )
    with pytest.raises(ValueError, match="final_guess needs the game's vocabulary"):
        play_games(
            FoulOnce(),
            FoulOnce(),
            ["lemon"],
            PlayConfig.of(max_turns=2, final_guess=True),
            show_progress=False,
        )


# ------------------------------------------------------------------------------- the dictionary guess


def test_next_token_logprobs_match_a_plain_forward_pass(player):
    """Prompts of different lengths sharing their beginning, in one call and again (the kept prompts
    reused): each row is the plain forward pass of its own prompt."""
    prompts = [
        build_prompt(DEFENDER, "", [{"role": "attacker", "content": line}], 3)
        for line in ("It is yellow.", "A long curved fruit that monkeys like to eat.", "Sour.")
    ]
    for _ in range(2):
        got = player.next_token_logprobs(prompts, PREDICTION_PHRASE)
        assert got.shape[0] == len(prompts)
        for row, prompt in zip(got, prompts):
            ids = (
                player.encode(prompt)
                + player.tokenizer(PREDICTION_PHRASE, add_special_tokens=False)["input_ids"]
            )
            with torch.no_grad():
                logits = player.model(input_ids=torch.tensor([ids])).logits[0, -1]
            assert row.shape == (logits.shape[-1],)
            torch.testing.assert_close(row, torch.log_softmax(logits.float(), -1), rtol=1e-4, atol=1e-4)


def test_dictionary_guess_is_the_vocabulary_word_with_the_highest_pmi(player):
    vocabulary = ["apple", "apples", "lemon", "coffee", "banana", "tea", "garden", "window", "river"]
    guesser = DictionaryGuesser(player, vocabulary, 3, PLAY_TEMPLATE)
    first = {w: player.tokenizer(" " + w, add_special_tokens=False)["input_ids"][0] for w in vocabulary}
    # Words sharing a first token keep only the earlier (more frequent) one.
    for word in vocabulary:
        kept = next(w for w in vocabulary if first[w] == first[word])
        assert (word in guesser.words) == (kept == word)
    histories = [
        [
            {"role": "attacker", "content": "It is yellow and sour."},
            {"role": "defender", "content": "Hmm."},
            {"role": "attacker", "content": "You squeeze it over fish."},
            {"role": "defender", "content": "Ok."},
            {"role": "attacker", "content": "Lemonade is made of it."},
        ],
        [{"role": "attacker", "content": "Hot and dark, in a cup."}],
    ]
    guesses = guesser.guess(histories)
    silent = player.next_token_logprobs([build_prompt(DEFENDER, "", [], 3)], PREDICTION_PHRASE)[0]
    for history, guess in zip(histories, guesses):
        talk = player.next_token_logprobs([build_prompt(DEFENDER, "", history, 3)], PREDICTION_PHRASE)[0]
        pmi = {w: float(talk[first[w]] - silent[first[w]]) for w in guesser.words}
        assert guess == max(pmi, key=pmi.get)
    assert DictionaryGuesser.utterance("lemon") == f"{PREDICTION_PHRASE} lemon."


def test_teacher_games_end_with_the_defender_guessing(player):
    words = ["lemon", "coffee", "river"]
    vocabulary = words + ["apple", "garden", "window"]
    stats = PlayStats()
    config = PlayConfig.of(
        max_turns=2, max_new_tokens=6, coached_attacker=True, final_guess=True, foul_retries=1
    )
    episodes = play_games(
        player, player, words, config, guess_words=vocabulary, show_progress=False, stats=stats
    )
    # Coached attackers never say the word, so every game reaches the defender's last utterance: a guess.
    assert [len(e["history"]) for e in episodes] == [4] * len(words)
    for episode in episodes:
        last = episode["history"][-1]["content"]
        assert last.startswith(PREDICTION_PHRASE) and last.split()[-1].rstrip(".") in vocabulary
        assert episode["outcome"] in (ATTACKER_WINS, DEFENDER_WINS)  # a guess decides the game
        strategies = json.loads(episode["strategies"])
        assert strategies["coached_attacker"] and strategies["final_guess"]
        attacker_lines = [u["content"] for u in episode["history"] if u["role"] == "attacker"]
        assert all(episode["target_word"] not in line.lower().split() for line in attacker_lines)
    assert stats.given_replies == sum(len(e["history"]) == 4 for e in episodes)


def test_nouns_only_word_list():
    assert is_noun_only("planet") and not is_noun_only("need") and not is_noun_only("quickly")
    words = top_words(200, nouns_only=True)
    assert len(words) == 200 and all(is_noun_only(w) for w in words)
    assert set(words) <= set(top_words(5000))


def test_play_command_with_teacher_strategies(player, tmp_path):
    from typer.testing import CliRunner

    from spag.cli import app
    from spag.game.episodes import read_episodes

    model = player.name
    words = tmp_path / "words.txt"
    words.write_text("lemon\ncoffee\n")
    vocabulary = tmp_path / "vocabulary.txt"
    vocabulary.write_text("lemon\ncoffee\nriver\ngarden\n")
    base = [
        "play",
        "--attacker",
        model,
        "--defender",
        model,
        "--words",
        str(words),
        "--max-turns",
        "1",
        "--max-new-tokens",
        "5",
        "--no-progress",
        "--final-guess",
        "--guess-words",
        str(vocabulary),
    ]
    result = CliRunner().invoke(
        app, base + ["-o", str(tmp_path / "eps"), "--coached-attacker", "--foul-retries", "1"]
    )
    assert result.exit_code == 0, result.output
    episodes = read_episodes(tmp_path / "eps")
    assert [len(e["history"]) for e in episodes] == [2, 2]  # one round: the attacker's clue, then a guess
    assert all(e["history"][1]["content"].startswith(PREDICTION_PHRASE) for e in episodes)
    assert "2 said by a strategy without the model" in result.output
    refused = CliRunner().invoke(
        app, base + ["-o", str(tmp_path / "other"), "--backend", "openai", "--base-url", "http://127.0.0.1:9"]
    )
    assert refused.exit_code == 2 and "hf or vllm backend" in refused.output
