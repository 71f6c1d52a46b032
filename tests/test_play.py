"""The self-play engine: game flow with scripted players, storage, resume, ranks; hf determinism; CLI."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from spag.game.episodes import read_episodes
from spag.game.taboo.outcomes import ATTACKER_BREAKS_RULES, ATTACKER_WINS, DEFENDER_WINS, TIE
from spag.harness.rule import claim_file
from spag.play.engine import Match, PlayConfig, PlayStats, play_games, play_matches, run_games
from spag.players import Reply
from spag.runtime.errors import DataError, OutputExists

_TARGET_RE = re.compile(r'The target word is "([^"]+)"')
_CLUE_RE = re.compile(r"clue: (\w+)")


def _role(prompt: str) -> str:
    return "attacker" if "You are the attacker" in prompt else "defender"


def _round(prompt: str) -> int:
    return int(re.search(r"round (\d+) of", prompt).group(1))


def scripted(prompt: str) -> str:
    """A deterministic pair of players whose behaviour depends on the target word.

    The attacker hides the word reversed in a clue; the defender reads the clue back.
    pear: the attacker says the word (foul). apple: the defender guesses right in round 1. plum: the
    defender guesses wrong. kiwi: the defender says the word in round 2. Anything else: a tie.
    """
    r = _round(prompt)
    if _role(prompt) == "attacker":
        word = _TARGET_RE.search(prompt).group(1)
        if word == "pear":
            return "Attacker: I am thinking of a pear."
        return f"Attacker: here is a clue: {word[::-1]} (round {r})\nDefender: I think I know"
    clue = _CLUE_RE.search(prompt)
    word = clue.group(1)[::-1] if clue else "?"
    if word == "apple":
        return "I know the word! It is apple"
    if word == "plum":
        return "I know the word! It is cherry"
    if word == "kiwi" and r == 2:
        return "I like kiwi fruit."
    return f"Let me think about round {r}."


class ScriptedPlayer:
    """A Player answering with a function of the prompt; it can fail after some calls (a crash)."""

    def __init__(self, name="scripted", respond=scripted, fail_after=None):
        self.name, self.respond, self.fail_after = name, respond, fail_after
        self.calls: list[list[str]] = []

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
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("simulated crash")
        self.calls.append(list(prompts))
        return [Reply(self.respond(p), n_tokens=len(self.respond(p).split())) for p in prompts]


WORDS = ["apple", "pear", "plum", "kiwi", "fig", "grape", "lemon"]
EXPECTED = {
    "apple": (DEFENDER_WINS, 2),
    "pear": (ATTACKER_BREAKS_RULES, 1),
    "plum": (ATTACKER_WINS, 2),
    "kiwi": (ATTACKER_WINS, 4),
    "fig": (TIE, 6),
    "grape": (TIE, 6),
    "lemon": (TIE, 6),
}


def _config(**kw):
    return PlayConfig.of(**{"max_turns": 3, "batch_size": 3, **kw})


# ------------------------------------------------------------------------------------------ game flow


def test_games_end_when_the_judge_decides():
    player = ScriptedPlayer()
    stats = PlayStats()
    episodes = play_games(player, player, WORDS, _config(), show_progress=False, stats=stats)
    assert [e["target_word"] for e in episodes] == WORDS
    for e in episodes:
        assert (e["outcome"], e["turns"]) == EXPECTED[e["target_word"]], e
        assert len(e["history"]) == e["turns"]  # nobody spoke after the decision
    # Roles alternate, replies are cleaned of invented labels and of the other player's line.
    fig = episodes[WORDS.index("fig")]["history"]
    assert [u["role"] for u in fig] == ["attacker", "defender"] * 3
    assert fig[0]["content"] == "here is a clue: gif (round 1)"
    assert all(u["n_tokens"] > 0 for u in fig)
    assert sum(stats.outcomes.values()) == stats.games == len(WORDS)
    assert stats.outcomes[TIE] == 3 and stats.empty_replies == 0
    # Never more games in flight than the batch size; finished games are replaced by new ones.
    assert max(len(c) for c in player.calls) == 3
    assert sum(len(c) for c in player.calls) == sum(e["turns"] for e in episodes)
    assert "7 games" in stats.line() and "tie 3" in stats.line()


def test_each_player_sees_only_its_own_role():
    attacker, defender = ScriptedPlayer("A"), ScriptedPlayer("B")
    episodes = play_games(attacker, defender, WORDS, _config(), show_progress=False)
    assert {_role(p) for c in attacker.calls for p in c} == {"attacker"}
    assert {_role(p) for c in defender.calls for p in c} == {"defender"}
    assert not any("The target word is" in p for c in defender.calls for p in c)
    assert [(e["outcome"], e["turns"]) for e in episodes] == [EXPECTED[w] for w in WORDS]
    assert episodes[0]["attacker_model"] == "A" and episodes[0]["defender_model"] == "B"


def test_empty_replies_are_resampled_then_counted():
    tries: dict[str, int] = {}

    def flaky(prompt):
        key = prompt
        tries[key] = tries.get(key, 0) + 1
        if "lemon" in prompt:
            return "Attacker:"  # nothing left once the label is removed, every time
        return "" if tries[key] == 1 else scripted(prompt)

    player = ScriptedPlayer(respond=flaky)
    stats = PlayStats()
    episodes = play_games(
        player, player, ["fig", "lemon"], _config(max_turns=1), show_progress=False, stats=stats
    )
    fig, lemon = episodes
    assert all(u["content"] for u in fig["history"]) and fig["empty_replies"] == 0
    assert lemon["history"][0]["content"] == "" and lemon["empty_replies"] >= 1
    assert stats.empty_replies == lemon["empty_replies"] == 1  # the attacker's; the defender recovered
    assert stats.resampled_replies >= 2


def test_without_empty_retries_an_empty_reply_is_kept_as_the_original_did():
    silent = ScriptedPlayer(respond=lambda prompt: "")
    episodes = play_games(
        silent, ScriptedPlayer(), ["fig"], _config(max_turns=1, empty_retries=0), show_progress=False
    )
    assert episodes[0]["history"][0]["content"] == "" and episodes[0]["empty_replies"] == 1
    assert len(silent.calls) == 1  # asked once, not again
    again = ScriptedPlayer(respond=lambda prompt: "")
    play_games(again, ScriptedPlayer(), ["fig"], _config(max_turns=1), show_progress=False)
    assert len(again.calls) == 3  # the default: two more tries


def test_truncated_replies_are_counted():
    class Endless(ScriptedPlayer):
        def generate(self, prompts, **kw):
            return [Reply("word " * kw["max_new_tokens"], kw["max_new_tokens"], "length") for _ in prompts]

    stats = PlayStats()
    (episode,) = play_games(
        Endless(),
        Endless(),
        ["fig"],
        _config(max_turns=1, max_new_tokens=5),
        show_progress=False,
        stats=stats,
    )
    assert episode["truncated_replies"] == 2 == stats.truncated_replies
    assert all(u["truncated"] and u["n_tokens"] == 5 for u in episode["history"])


# -------------------------------------------------------------------------------------- storage


def test_shards_resume_after_a_crash(tmp_path):
    out = tmp_path / "episodes"
    words = WORDS * 2  # a repeated word is two games
    crashing = ScriptedPlayer(fail_after=4)
    with pytest.raises(RuntimeError, match="simulated crash"):
        play_games(crashing, crashing, words, _config(batch_size=2), output=out, show_progress=False)
    saved = read_episodes(out)
    assert 0 < len(saved) < len(words)  # the finished games were written before the crash surfaced
    assert all(not p.name.endswith(".tmp") for p in out.iterdir())

    with pytest.raises(DataError, match="--resume"):
        play_games(
            ScriptedPlayer(), ScriptedPlayer(), words, _config(batch_size=2), output=out, show_progress=False
        )

    player = ScriptedPlayer()
    stats = PlayStats()
    episodes = play_games(
        player,
        player,
        words,
        _config(batch_size=2),
        output=out,
        resume=True,
        show_progress=False,
        stats=stats,
    )
    assert stats.resumed == len(saved) and stats.games == len(words) - len(saved)
    assert [e["word_index"] for e in episodes] == list(range(len(words)))
    assert [e["target_word"] for e in episodes] == words
    on_disk = read_episodes(out)
    assert sorted(e["word_index"] for e in on_disk) == list(range(len(words)))  # no duplicate, no gap
    # Exactly the words without an episode were started again; the already-played ones were not.
    first_prompts = [p for c in player.calls for p in c if "has not started" in p]
    saved_indices = {e["word_index"] for e in saved}
    started = Counter(_TARGET_RE.search(p).group(1) for p in first_prompts)
    assert started == Counter(w for i, w in enumerate(words) if i not in saved_indices)

    again = play_games(
        ScriptedPlayer(),
        ScriptedPlayer(),
        words,
        _config(batch_size=2),
        output=out,
        resume=True,
        show_progress=False,
    )
    assert again == episodes  # nothing left to play


def test_resume_with_other_words_or_settings_is_refused_or_replayed_as_asked(tmp_path, capsys):
    out = tmp_path / "eps"
    player = ScriptedPlayer()
    play_games(player, player, WORDS[:3], _config(), output=out, show_progress=False)
    grown = play_games(player, player, WORDS, _config(), output=out, resume=True, show_progress=False)
    assert [e["target_word"] for e in grown] == WORDS
    assert "again" not in capsys.readouterr().err

    # `spag play --resume` with another word list: refused, every kept game still there
    changed = ["fig", "apple", "pear"]
    with pytest.raises(DataError, match="word list .*--overwrite to play every game again"):
        play_games(player, player, changed, _config(), output=out, resume=True, show_progress=False)
    assert sorted(e["target_word"] for e in read_episodes(out)) == sorted(WORDS)

    # a pipeline stage re-run because something changed: played again, with a note
    replayed = play_games(
        player, player, changed, _config(), output=out, resume=True, show_progress=False, stale="restart"
    )
    assert "word list" in capsys.readouterr().err
    assert replayed == play_games(ScriptedPlayer(), ScriptedPlayer(), changed, _config(), show_progress=False)
    assert sorted(e["target_word"] for e in read_episodes(out)) == sorted(changed)  # the stale ones are gone

    with pytest.raises(DataError, match="max_turns=3, this run has 2"):
        play_games(
            player, player, changed, _config(max_turns=2), output=out, resume=True, show_progress=False
        )
    play_games(
        player,
        player,
        changed,
        _config(max_turns=2),
        output=out,
        resume=True,
        show_progress=False,
        stale="restart",
    )
    assert "max_turns=3" in capsys.readouterr().err
    assert [e["max_turns"] for e in read_episodes(out)] == [2, 2, 2]


def test_ranks_split_the_words(tmp_path, monkeypatch):
    out = tmp_path / "eps"
    player = ScriptedPlayer()
    for rank in (1, 0):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        episodes = play_games(
            player, player, WORDS, _config(), output=out, show_progress=False, resume=rank == 0
        )
        assert [e["word_index"] for e in episodes] == list(range(rank, len(WORDS), 2))
    names = sorted(p.name for p in out.glob("*.parquet"))
    assert names and all(re.fullmatch(r"shard-r[01]-\d{5}\.parquet", n) for n in names)
    assert {n[7] for n in names} == {"0", "1"}
    assert sorted(e["word_index"] for e in read_episodes(out)) == list(range(len(WORDS)))


# --------------------------------------------------------------------------------- real tiny model


def test_two_matches_played_together_are_the_matches_played_alone_in_fewer_calls(tmp_path):
    """A in the opening role against B and B against A, played together: each match's episodes, output
    and statistics are what it has alone, and each player answers both matches' turns in one call."""
    config = _config()
    a, b = ScriptedPlayer("a"), ScriptedPlayer("b")
    alone = [
        play_games(a, b, WORDS, config, show_progress=False),
        play_games(b, a, WORDS, config, show_progress=False),
    ]
    calls_alone = len(a.calls) + len(b.calls)
    a.calls, b.calls = [], []
    stats = [PlayStats(), PlayStats()]
    together = play_matches(
        [Match(a, b, tmp_path / "ab", stats[0]), Match(b, a, tmp_path / "ba", stats[1])],
        WORDS,
        config,
        show_progress=False,
    )
    assert together == alone
    assert [_by_word(tmp_path / name) for name in ("ab", "ba")] == [
        [(e["word_index"], e["target_word"], json.dumps(e["history"]), e["outcome"]) for e in episodes]
        for episodes in alone
    ]
    assert [s.games for s in stats] == [len(WORDS)] * 2
    assert [s.utterances for s in stats] == [sum(len(e["history"]) for e in episodes) for episodes in alone]
    assert len(a.calls) + len(b.calls) < calls_alone
    assert (
        max(len(prompts) for prompts in a.calls + b.calls) > config.sampling.batch_size
    )  # both matches' turns


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from spag.testing import make_tiny_checkpoint

    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.slow
def test_a_resumed_run_keeps_its_games_and_plays_each_missing_one_once(tiny, tmp_path, dtype):
    """What resuming promises in any dtype: the finished games stay as they are, every missing word is
    played once, with its own seed. In float32 the result is also the uninterrupted run's, game for game; in
    bfloat16 a resumed game may take another path (its batch differs, and bfloat16 sums depend on it)."""
    config = PlayConfig.of(max_turns=2, max_new_tokens=6, batch_size=2, seed=3)
    words = ["apple", "river", "cloud", "horse", "table"]
    whole = run_games(tiny, tiny, words, config, device="cpu", dtype=dtype, show_progress=False)
    out = tmp_path / "eps"
    kept = run_games(
        tiny, tiny, words[:3], config, device="cpu", dtype=dtype, output=out, show_progress=False
    )
    resumed = run_games(
        tiny, tiny, words, config, device="cpu", dtype=dtype, output=out, resume=True, show_progress=False
    )
    assert [e["target_word"] for e in resumed] == words
    assert resumed[:3] == kept
    assert sorted(e["word_index"] for e in read_episodes(out)) == list(range(len(words)))
    if dtype == "float32":
        assert [e["history"] for e in resumed] == [e["history"] for e in whole]


@pytest.mark.slow
def test_hf_backend_is_deterministic_with_a_seed(tiny, tmp_path):
    config = PlayConfig.of(max_turns=2, max_new_tokens=6, batch_size=2, seed=3)  # 3 words: a refill
    words = ["apple", "river", "cloud"]
    first = run_games(tiny, tiny, words, config, device="cpu", show_progress=False)
    second = run_games(tiny, tiny, words, config, device="cpu", output=tmp_path / "o", show_progress=False)
    assert [e["history"] for e in first] == [e["history"] for e in second]
    assert all(e["history"][0]["content"] for e in first)
    other = run_games(
        tiny,
        tiny,
        words,
        PlayConfig.of(max_turns=2, max_new_tokens=6, batch_size=2, seed=4),
        device="cpu",
        show_progress=False,
    )
    assert [e["history"] for e in other] != [e["history"] for e in first]


@pytest.mark.slow
def test_a_games_replies_do_not_depend_on_the_batch_it_is_played_in(tiny):
    """A game depends on its word and seeds, not on the games beside it: in float32 the same words give
    the same games played two at a time, with refills, or all at once (the default's stages at batch 64
    played the same games too: docs/log/benchmarks.md, 2026-11-28)."""
    words = ["apple", "river", "cloud", "horse", "table"]
    by_size = {
        size: run_games(
            tiny,
            tiny,
            words,
            PlayConfig.of(max_turns=2, max_new_tokens=6, batch_size=size, seed=3),
            device="cpu",
            dtype="float32",
            show_progress=False,
        )
        for size in (2, len(words))
    }
    histories = {size: [e["history"] for e in episodes] for size, episodes in by_size.items()}
    assert histories[2] == histories[len(words)]
    assert sum(len(h) for h in histories[2]) > len(words)  # games of more than one line each


@pytest.mark.slow
def test_play_command(tiny, tmp_path):
    from typer.testing import CliRunner

    from spag.cli import app

    words = tmp_path / "words.txt"
    words.write_text("apple\nriver\ncloud\n")
    out = tmp_path / "eps"
    args = [
        "play",
        "--attacker",
        tiny,
        "--defender",
        tiny,
        "--words",
        str(words),
        "-o",
        str(out),
        "--max-turns",
        "1",
        "--max-new-tokens",
        "6",
        "--limit",
        "2",
        "--no-progress",
        "--export-json",
        str(tmp_path / "eps.json"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "[spag play] 2 games" in result.output and "tokens/s" in result.output
    assert len(read_episodes(out)) == 2 and len(json.loads((tmp_path / "eps.json").read_text())) == 2
    resumed = CliRunner().invoke(app, args[:-2] + ["--limit", "3", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "1 games" in resumed.output and "2 episodes kept" in resumed.output
    assert [e["target_word"] for e in read_episodes(out)] == ["apple", "river", "cloud"]


# ------------------------------------------------------------------------------ ranks under torchrun


def _play_command(model, words, out, *extra) -> list[str]:
    import sys

    return [
        sys.executable,
        "-m",
        "spag.cli",
        "play",
        "--attacker",
        str(model),
        "--defender",
        str(model),
        "--words",
        str(words),
        "-o",
        str(out),
        "--dtype",
        "float32",
        "--device",
        "cpu",
        "--max-turns",
        "2",
        "--max-new-tokens",
        "8",
        "--batch-size",
        "2",
        "--seed",
        "1",
        "--no-progress",
        *extra,
    ]


def _torchrun(*command) -> list[str]:
    import os
    import sys

    return [
        os.path.join(os.path.dirname(sys.executable), "torchrun"),
        "--standalone",
        "--nproc_per_node",
        "2",
        *command[1:],
    ]  # torchrun takes `-m spag.cli ...` in place of `python -m spag.cli ...`


def _by_word(folder) -> list[tuple]:
    return sorted(
        (e["word_index"], e["target_word"], json.dumps(e["history"]), e["outcome"])
        for e in read_episodes(folder)
    )


@pytest.mark.slow
def test_two_ranks_under_torchrun_play_the_games_of_one_process_and_resume_a_killed_rank(tiny, tmp_path):
    """`spag play` as two ranks: each writes its own shards (its share of the words), together the episodes of
    a single-process run. A rank killed part-way takes the other down with it (torchrun); the re-run with
    --resume plays only the unfinished games and ends with the same episodes."""
    import subprocess
    import time

    import psutil

    words = tmp_path / "words.txt"
    words.write_text(
        "\n".join(f"{w}{i}" if i >= len(WORDS) else w for i, w in enumerate(WORDS * 6)) + "\n"
    )  # 42 words, 21 per rank
    subprocess.run(
        _play_command(tiny, words, tmp_path / "single"), check=True, capture_output=True, timeout=600
    )
    single = _by_word(tmp_path / "single")
    assert len(single) == 42

    ranks = tmp_path / "ranks"
    done = subprocess.run(
        _torchrun(*_play_command(tiny, words, ranks)), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert {p.name[:8] for p in ranks.glob("*.parquet")} == {"shard-r0", "shard-r1"}
    assert _by_word(ranks) == single
    assert "rank 1/2: 21 games" in done.stdout + done.stderr

    killed = tmp_path / "killed"
    launcher = subprocess.Popen(
        _torchrun(*_play_command(tiny, words, killed)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while (
        not list(killed.glob("shard-r1-*.parquet"))
        and launcher.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.02)

    def rank(process):
        try:
            return process.environ().get("RANK")
        except psutil.NoSuchProcess:  # a short-lived helper process that ended while listed
            return None

    rank_1 = [p for p in psutil.Process(launcher.pid).children(recursive=True) if rank(p) == "1"]
    assert len(rank_1) == 1
    rank_1[0].kill()
    assert launcher.wait(timeout=120) != 0
    kept = _by_word(killed)
    assert 0 < len(kept) < 42, "rank 1 should have been killed part-way"

    again = subprocess.run(
        _torchrun(*_play_command(tiny, words, killed, "--resume")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert _by_word(killed) == single
    assert set(kept) <= set(single)


class Counted:
    """A real player whose prompts are counted (which opening prompts reach the model)."""

    def __init__(self, player):
        self.player, self.asked = player, Counter()

    def __getattr__(self, name):
        return getattr(self.player, name)

    def generate(self, prompts, **options):
        self.asked.update(prompts)
        return self.player.generate(prompts, **options)


def test_an_evaluations_matches_share_the_opening_lines_and_play_the_same_games(tiny, tmp_path):
    """One player against two opponents on the same words and seeds: with OpeningLines shared, its opening
    lines are generated once, in the first match, and every game of both matches is what it is without."""
    from spag.play.engine import OpeningLines
    from spag.players import load_player
    from spag.testing import make_tiny_checkpoint

    options = {"device": "cpu", "dtype": "float32"}
    other = str(make_tiny_checkpoint(tmp_path / "other", seed=1))
    config = PlayConfig.of(max_turns=2, temperature=1.0, max_new_tokens=6, seed=3, batch_size=2)
    words = ["coffee", "river", "garden"]
    player = Counted(load_player(tiny, "hf", **options))
    opponents = [load_player(tiny, "hf", **options), load_player(other, "hf", **options)]
    alone = [play_games(player, rival, words, config, show_progress=False) for rival in opponents]
    asked_alone, player.asked = player.asked, Counter()
    openings = OpeningLines()
    shared = [
        play_games(player, rival, words, config, show_progress=False, openings=openings)
        for rival in opponents
    ]
    assert shared == alone
    for word in words:
        opening = config.prompt(config.game.roles[0], word, [])
        assert asked_alone[opening] == 2 * player.asked[opening] > 0
    later = [p for p in asked_alone if p not in {config.prompt(config.game.roles[0], w, []) for w in words}]
    assert later and all(player.asked[p] == asked_alone[p] for p in later)  # later turns are asked as before


def test_the_clue_lines_kept_as_opening_lines_open_the_base_teachers_games(tiny, tmp_path):
    """The skill metrics' clue lines (the base model's coached descriptions, seed by seed) kept by ``clue_set``
    and read back with another model's lines: a coached attacker of the same model on the same seeds opens its
    games with them without asking the model, and every game is what it is without them."""
    from spag.game.taboo.card import TabooStrategies
    from spag.game.taboo.skill import clue_set
    from spag.game.taboo.strategies import WithStrategies
    from spag.play.engine import OpeningLines
    from spag.players import load_player
    from spag.testing import make_tiny_checkpoint

    options = {"device": "cpu", "dtype": "float32"}
    other = str(make_tiny_checkpoint(tmp_path / "other", seed=1))
    config = PlayConfig.of(max_turns=2, temperature=1.0, max_new_tokens=6, seed=3, batch_size=2)
    words = ["coffee", "river", "garden"]
    writer, said = Counted(load_player(tiny, "hf", **options)), OpeningLines()
    clues = clue_set(writer, words, config, 2, said=said)
    said.write(tmp_path / "base.json")
    OpeningLines().write(tmp_path / "none.json")
    described = set(writer.asked)

    base, rival = Counted(load_player(tiny, "hf", **options)), load_player(other, "hf", **options)
    teacher = WithStrategies(
        base, TabooStrategies(coached_attacker=True, foul_retries=2), name="base-teacher"
    )
    alone = play_games(teacher, rival, words, config, show_progress=False)
    asked_alone, base.asked = base.asked, Counter()
    read = play_games(
        teacher,
        rival,
        words,
        config,
        show_progress=False,
        openings=OpeningLines.read(tmp_path / "none.json", tmp_path / "base.json"),
    )
    assert read == alone
    assert [e["history"][0]["content"] for e in read] == [
        c["line"] for c in clues if c["seed"] == config.seed
    ]
    assert described & set(asked_alone) and not described & set(base.asked)
    assert all(base.asked[p] == n for p, n in asked_alone.items() if p not in described)


def test_opening_lines_kept_in_a_file_are_read_by_a_later_load_of_the_same_model_only(tiny, tmp_path, capsys):
    """What a skill measurement generated (``opening_lines`` with ``said``) and wrote is read by the games of
    a later load of that model: its opening prompts never reach the model and every game is what it is
    without the file. Another model asks its own; a file from another machine is not used; a bad record
    is named."""
    from spag.play.engine import OpeningLines
    from spag.players import load_player
    from spag.players.provenance import machine
    from spag.testing import make_tiny_checkpoint

    options = {"device": "cpu", "dtype": "float32"}
    other = str(make_tiny_checkpoint(tmp_path / "other", seed=1))
    config = PlayConfig.of(max_turns=2, temperature=1.0, max_new_tokens=6, seed=3, batch_size=2)
    words = ["coffee", "river", "garden"]
    said = OpeningLines()
    lines = config.opening_lines(load_player(tiny, "hf", **options), words, said=said)
    path = tmp_path / "opening_lines.json"
    said.write(path)
    assert len(OpeningLines.read(path)) == len(said) >= len(words)
    kept = path.read_bytes()
    with pytest.raises(OutputExists):  # a file already there is replaced only when the claim says so
        claim_file(path, "opening lines")
    assert path.read_bytes() == kept
    OpeningLines().write(path)  # a stage's own output: replaced
    assert len(OpeningLines.read(path)) == 0
    said.write(path)

    player, rival = Counted(load_player(tiny, "hf", **options)), load_player(other, "hf", **options)
    alone = play_games(player, rival, words, config, show_progress=False)
    asked_alone, player.asked = player.asked, Counter()
    read = play_games(player, rival, words, config, show_progress=False, openings=OpeningLines.read(path))
    assert read == alone
    assert [e["history"][0]["content"] for e in read] == lines
    openings = {config.prompt(config.game.roles[0], w, []) for w in words}
    assert not set(player.asked) & openings and set(asked_alone) & openings
    assert all(player.asked[p] == n for p, n in asked_alone.items() if p not in openings)

    stranger = Counted(rival)  # another model on the same prompts and seeds
    play_games(stranger, player, words, config, show_progress=False, openings=OpeningLines.read(path))
    assert set(stranger.asked) >= openings

    data = json.loads(path.read_text())
    data["machine"]["cpu"]["kernels"]["torch"] = "another"
    path.write_text(json.dumps(data))
    assert len(OpeningLines.read(path)) == 0
    assert "written on another machine" in capsys.readouterr().err
    data["machine"] = json.loads(json.dumps(machine()))
    data["replies"][1] = {"player": "x", "seed": 1}
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"opening_lines\.json: record 1: not an opening-line record"):
        OpeningLines.read(path)


def test_a_single_episodes_file_behind_a_symlink_is_replaced_and_the_link_kept(tmp_path):
    """``-o LINK.parquet --overwrite``: the file the link names gets the new episodes (the old ones dropped
    first), and the link stays a link."""
    from spag.game.episodes import read_episodes

    player = ScriptedPlayer()
    target, link = tmp_path / "kept" / "games.parquet", tmp_path / "games.parquet"
    play_games(player, player, ["fig"], _config(), output=target, show_progress=False)
    link.symlink_to(target)
    play_games(player, player, ["apple", "plum"], _config(), output=link, overwrite=True, show_progress=False)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert [e["target_word"] for e in read_episodes(target)] == ["apple", "plum"]
