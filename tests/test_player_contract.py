"""The Player contract, checked against every backend that runs a model here: hf and vLLM (CPU build).

Tiny real checkpoints on disk make each backend write a known text: ``make_scripted_checkpoint`` puts a
table of token transitions into a model's weights, so a greedy reply is the script whatever the engine.
Both engines load the same files; the contract is what a game relies on: a reply ends where the next
speaker starts, min/max new tokens hold, a reply cut at max_new_tokens says so, a seed reproduces.
Every model runs in float32, so the expectations hold on any CPU (bfloat16 or not).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest

from spag.game.taboo.prompts import build_prompt
from spag.game.taboo.replies import STOP_STRINGS, STOPS
from spag.players import close_player, load_player
from spag.testing import make_scripted_checkpoint, make_tiny_checkpoint

BACKENDS = ["hf", "vllm"]
HISTORY = [
    {"role": "attacker", "content": "What do you drink in the morning to wake up?"},
    {"role": "defender", "content": "Usually a hot cup of tea."},
]
PROMPTS = [
    build_prompt("attacker", "coffee", [], 3),
    build_prompt("defender", "coffee", HISTORY[:1], 3),
    build_prompt("attacker", "apple", HISTORY, 3),
]
SCRIPTS = {  # name: (script, loop)
    "speaker": ("Think of tea\ndefender: coffee is it", False),
    "unlisted_speaker": ("Hot tea\n(Defender): coffee", False),
    "eager_end": ("", False),
    "endless": ("warm cup ", True),
}
MEMORY = 0.05  # of this machine's memory per vLLM engine: plenty for a tiny model's KV cache


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    root = tmp_path_factory.mktemp("scripted")
    return {
        name: make_scripted_checkpoint(root / name, script, loop=loop)
        for name, (script, loop) in SCRIPTS.items()
    }


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    # Two heads of 32: vLLM's CPU attention has no smaller head size.
    return make_tiny_checkpoint(tmp_path_factory.mktemp("random") / "ckpt", heads=2)


@contextmanager
def opened(model, backend: str):
    memory = {"gpu_memory_utilization": MEMORY} if backend == "vllm" else {}
    player = load_player(str(model), backend, dtype="float32", **memory)
    try:
        yield player
    finally:
        close_player(player)


def tokens_until(tokenizer, script: str, text: str) -> int:
    """How many of the script's tokens a reply has generated once ``text`` has appeared in it."""
    ids = tokenizer(script, add_special_tokens=False)["input_ids"]
    return next(k for k in range(1, len(ids) + 1) if text in tokenizer.decode(ids[:k]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reply_stops_where_the_next_speaker_starts(backend, scripted):
    with opened(scripted["speaker"], backend) as player:
        replies = player.generate(
            PROMPTS,
            temperature=0,
            max_new_tokens=40,
            min_new_tokens=0,
            stop=STOPS.strings,
            stop_pattern=STOPS.pattern,
        )
        expected = tokens_until(player.tokenizer, SCRIPTS["speaker"][0], "\ndefender:")
    assert [r.text for r in replies] == ["Think of tea"] * 3
    assert all(r.finish_reason == "stop" and not r.truncated for r in replies)
    # Generation stopped at the stop string: the tokens through "\ndefender:", none of the rest.
    assert [r.n_tokens for r in replies] == [expected] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_next_speaker_no_stop_string_names_is_cut_from_the_text(backend, scripted):
    with opened(scripted["unlisted_speaker"], backend) as player:
        replies = player.generate(
            PROMPTS[:1],
            temperature=0,
            max_new_tokens=40,
            min_new_tokens=0,
            stop=STOPS.strings,
            stop_pattern=STOPS.pattern,
        )
        raw = player.generate(PROMPTS[:1], temperature=0, max_new_tokens=40, min_new_tokens=0)
    assert replies[0].text == "Hot tea"
    assert replies[0].finish_reason == "stop"  # the turn ended where the other speaker began
    # without stop strings (game.replies: raw) the reply runs on past the other speaker's label
    assert raw[0].text.startswith("Hot tea\n") and len(raw[0].text) > len("Hot tea\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_min_new_tokens_holds_back_an_eager_end(backend, scripted):
    with opened(scripted["eager_end"], backend) as player:
        eager = player.generate(PROMPTS, temperature=0, max_new_tokens=8, min_new_tokens=0)
        held = player.generate(PROMPTS, temperature=0, max_new_tokens=8, min_new_tokens=3)
        capped = player.generate(PROMPTS, temperature=0, max_new_tokens=2, min_new_tokens=5)
    assert [(r.text, r.n_tokens, r.finish_reason) for r in eager] == [("", 0, "stop")] * 3
    # Three tokens, then the end of the turn (not counted) as soon as it is allowed.
    assert [(r.n_tokens, r.finish_reason) for r in held] == [(3, "stop")] * 3
    assert all(r.text for r in held)
    # min_new_tokens above max_new_tokens: max wins, and the reply says it was cut.
    assert [(r.n_tokens, r.truncated) for r in capped] == [(2, True)] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reply_cut_at_max_new_tokens_says_so(backend, scripted):
    with opened(scripted["endless"], backend) as player:
        replies = player.generate(PROMPTS, temperature=0, max_new_tokens=7, min_new_tokens=0)
        decoded = player.tokenizer.decode(
            player.tokenizer("warm cup " * 7, add_special_tokens=False)["input_ids"][:7]
        )
    assert all(r.n_tokens == 7 and r.truncated and r.finish_reason == "length" for r in replies)
    assert [r.text for r in replies] == [decoded] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_seeded_sampling_reproduces_per_prompt(backend, random_model):
    kw = dict(temperature=1.2, top_k=50, max_new_tokens=10, min_new_tokens=1)
    seeds = [11, 12, 13]
    with opened(random_model, backend) as player:
        batch = player.generate(PROMPTS, seed=seeds, **kw)
        again = player.generate(PROMPTS, seed=seeds, **kw)
        reversed_batch = player.generate(PROMPTS[::-1], seed=seeds[::-1], **kw)[::-1]
        alone = player.generate(PROMPTS[1:2], seed=seeds[1:2], **kw)
        other = player.generate(PROMPTS, seed=[21, 22, 23], **kw)
    texts = [r.text for r in batch]
    assert [r.text for r in again] == texts
    # A prompt's sampling depends on its own seed, not on the batch it is in.
    assert [r.text for r in reversed_batch] == texts and alone[0].text == texts[1]
    assert [r.text for r in other] != texts
    assert all(1 <= r.n_tokens <= 10 for r in batch)


def test_vllm_engine_options_on_this_machine(random_model):
    """On vLLM's CPU build: eager, whole prompts only (seeded requests), a KV cache of the given share."""
    from spag.players.vllm import engine_options, on_vllm_cpu

    assert on_vllm_cpu()
    options = engine_options(
        str(random_model),
        dtype="auto",
        gpu_memory_utilization=0.1,
        enforce_eager=None,
        trust_remote_code=False,
        cpu=True,
    )
    assert options["enforce_eager"] is True and options["enable_chunked_prefill"] is False
    assert options["max_num_batched_tokens"] >= 2048  # the model's context: any prompt fits one step
    assert options["kv_cache_memory_bytes"] > 0 and "gpu_memory_utilization" not in options
    assert options["dtype"] in ("float32", "bfloat16")
    gpu = engine_options(
        str(random_model),
        dtype="float16",
        gpu_memory_utilization=0.4,
        enforce_eager=None,
        trust_remote_code=False,
        cpu=False,
    )
    assert gpu == {
        "dtype": "float16",
        "enforce_eager": False,
        "logprobs_mode": "raw_logprobs",
        "gpu_memory_utilization": 0.4,
    }


def test_two_vllm_engines_play_one_game_in_one_process(scripted, monkeypatch):
    """evaluate with two different models: both engines live at once, each with its own KV cache. The
    engines leave LD_PRELOAD as it was: a later child process (torchrun) keeps glibc's allocator."""
    from spag.play.engine import PlayConfig, play_games

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    with opened(scripted["speaker"], "vllm") as attacker, opened(scripted["eager_end"], "vllm") as defender:
        assert "LD_PRELOAD" not in os.environ
        episodes = play_games(
            attacker,
            defender,
            ["coffee"],
            PlayConfig.of(temperature=0, max_turns=2, max_new_tokens=16, min_new_tokens=1),
            show_progress=False,
        )
    (episode,) = episodes
    assert episode["history"][0] == {**episode["history"][0], "role": "attacker", "content": "Think of tea"}
    assert episode["history"][1]["role"] == "defender"


def test_a_vllm_engine_plays_on_after_another_in_this_process_closes(scripted):
    """evaluate plays its model against one opponent after another, closing each: closing an opponent's
    in-process engine leaves the model's engine able to generate, and the last close shuts it down."""
    kw = dict(temperature=0, max_new_tokens=6, min_new_tokens=1)
    with opened(scripted["speaker"], "vllm") as player:
        with opened(scripted["eager_end"], "vllm") as opponent:
            before = player.generate(PROMPTS[:1], **kw)
            opponent.generate(PROMPTS[:1], **kw)
        after = player.generate(PROMPTS[:1], **kw)
    assert after[0].text == before[0].text and after[0].text.startswith("Think")
    assert player.llm is None  # closed for good once the last engine is closed


# ------------------------------------------------------------------------------ the embedded model (slow)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_embedded_model_keeps_the_contract(backend, embedded_model):
    kw = dict(
        temperature=1.2,
        top_k=50,
        max_new_tokens=24,
        min_new_tokens=2,
        stop=STOPS.strings,
        stop_pattern=STOPS.pattern,
    )
    seeds = [3, 4, 5]
    with opened(embedded_model, backend) as player:
        first = player.generate(PROMPTS, seed=seeds, **kw)
        second = player.generate(PROMPTS, seed=seeds, **kw)
    assert [r.text for r in first] == [r.text for r in second]
    for reply in first:
        assert 2 <= reply.n_tokens <= 24
        assert reply.truncated == (reply.finish_reason == "length")
        assert not reply.truncated or reply.n_tokens == 24
        assert not any(s in reply.text for s in STOP_STRINGS)


def play_twice_on_vllm(model, tmp_path, words: list[str], *options) -> list[list[dict]]:
    """``spag play --backend vllm`` run twice with the same seed: each run's episodes in word order."""
    from spag.game.episodes import read_episodes
    from spag.testing import run_cli

    word_file = tmp_path / "words.txt"
    word_file.write_text("".join(w + "\n" for w in words))
    runs = []
    for name in ("first", "second"):
        out = tmp_path / f"{name}.parquet"
        result = run_cli(
            "play",
            "--attacker",
            model,
            "--defender",
            model,
            "--words",
            word_file,
            "-o",
            out,
            "--backend",
            "vllm",
            "--dtype",
            "float32",
            "--gpu-memory-utilization",
            MEMORY,
            "--no-progress",
            *options,
        )
        assert result.code == 0, result.stderr
        assert f"[spag play] {len(words)} games" in result.stderr + result.stdout
        runs.append(sorted(read_episodes(out), key=lambda e: e["word_index"]))
    return runs


def test_spag_play_with_vllm_gives_the_same_episodes_for_the_same_seed(random_model, tmp_path):
    runs = play_twice_on_vllm(
        random_model,
        tmp_path,
        ["apple", "river", "coffee"],
        "--max-turns",
        "2",
        "--max-new-tokens",
        "8",
        "--batch-size",
        "2",
    )
    assert [e["history"] for e in runs[0]] == [e["history"] for e in runs[1]]
    assert [e["outcome"] for e in runs[0]] == [e["outcome"] for e in runs[1]]


def test_evaluate_and_tournament_commands_on_vllm(scripted, tmp_path):
    """Two (and three) different models, each its own vLLM engine, in the commands that play them."""
    import json

    from spag.testing import run_cli

    words = tmp_path / "eval.txt"
    words.write_text("river\ncoffee\n")
    common = [
        "--words",
        words,
        "--max-turns",
        "1",
        "--max-new-tokens",
        "8",
        "--backend",
        "vllm",
        "--dtype",
        "float32",
        "--gpu-memory-utilization",
        MEMORY,
    ]
    evaluated = run_cli(
        "evaluate",
        "--model",
        scripted["speaker"],
        "--opponent",
        scripted["eager_end"],
        "-o",
        tmp_path / "eval.json",
        *common,
    )
    assert evaluated.code == 0, evaluated.stderr
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert metrics["games"] == 4  # 2 words x 2 roles
    models = [scripted[name] for name in ("speaker", "eager_end", "endless")]
    played = run_cli(
        "tournament", "--models", *models, "-o", tmp_path / "t.json", "--resamples", "50", *common
    )
    assert played.code == 0, played.stderr
    assert json.loads((tmp_path / "t.json").read_text())["games"] == 3 * 2 * 2  # ordered pairs x words


@pytest.mark.slow
def test_spag_play_on_the_embedded_model_with_vllm_reproduces_its_episodes(embedded_model, tmp_path):
    runs = play_twice_on_vllm(
        embedded_model, tmp_path, ["apple", "river"], "--max-turns", "1", "--max-new-tokens", "24"
    )
    assert [e["history"] for e in runs[0]] == [e["history"] for e in runs[1]]
    assert all(u["content"].strip() for e in runs[0] for u in e["history"][:1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_played_games_record_how_the_players_ran(backend, random_model):
    """The provenance a stage's metrics carry: backend, engine, device, resolved dtype, CPU, versions."""
    from spag.play.engine import PlayConfig, PlayStats, play_games

    stats = PlayStats()
    with opened(random_model, backend) as player:
        play_games(
            player,
            player,
            ["coffee"],
            PlayConfig.of(max_turns=1, max_new_tokens=4),
            show_progress=False,
            stats=stats,
        )
    attacker = stats.provenance["players"]["attacker"]
    assert attacker["backend"] == backend and attacker["dtype"] == "float32" and attacker["device"] == "cpu"
    assert attacker["engine"] == ("batched" if backend == "hf" else "vllm-cpu")
    assert {"avx2", "avx512", "avx512_bf16", "amx_bf16"} <= set(stats.provenance["cpu"])
    assert stats.provenance["cpu"]["kernels"]["torch"] in (
        "DEFAULT",
        "AVX2",
        "AVX512",
        "ZVECTOR",
        "VSX",
        "SVE256",
    )
    assert {"torch", "transformers", "spag"} <= set(stats.provenance["versions"])


def test_provenance_names_the_kernels_torch_runs_when_they_are_capped():
    """A run held to lower kernels (as on an AVX2-only machine) says so, though the CPU has more."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    code = "import json; from spag.players.provenance import machine; print(json.dumps(machine()['cpu']['kernels']))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"torch": "DEFAULT", "onednn_max_isa": "AVX2"}


def test_vllm_scores_tokens_and_continuations_as_hf_does(random_model):
    """The vllm player's log-probabilities (named tokens of a position; continuations of several tokens,
    scored through a tree of shared prefixes) are the hf player's on the same float32 model, to float32's
    noise between two engines' kernels; the dictionary guess picks the same words and the skill metrics
    give the same ranks on both."""
    from spag.game.taboo.prompts import PLAY_TEMPLATE
    from spag.game.taboo.rules import PREDICTION_PHRASE
    from spag.game.taboo.skill import clue_ranks, guess_ranks
    from spag.game.taboo.strategies import DictionaryGuesser
    from spag.play.engine import PlayConfig

    words = ["coffee", "tea", "photosynthesis", "apple", "applesauce", "kaleidoscope", "sun"]
    vocabulary = ["coffee", "tea", "apple", "sun", "moon", "river", "bread", "cloud"]
    histories = [HISTORY[:1], HISTORY, []]
    clues = [(w, f"You drink {w} hot in the morning, a {w} a day") for w in words[:4]]
    got = {}
    for backend in BACKENDS:
        with opened(random_model, backend) as player:
            pieces = [player.tokenizer(" " + w, add_special_tokens=False)["input_ids"] for w in words]
            ids = sorted({t for p in pieces for t in p})
            guesser = DictionaryGuesser(player, vocabulary, 3, PLAY_TEMPLATE)
            got[backend] = (
                player.next_token_logprobs(PROMPTS, PREDICTION_PHRASE, token_ids=ids),
                player.continuation_logprobs(PROMPTS, PREDICTION_PHRASE, words),
                player.continuation_logprobs(PROMPTS, "", ["Hot tea", "Cold"], lead=""),
                guesser.guess(histories),
                clue_ranks(player, clues, words),
                guess_ranks(player, clues, words, PlayConfig.of(max_turns=3)),
            )
    assert max(len(p) for p in pieces) >= 3 and len({p[0] for p in pieces}) < len(pieces)  # a real tree
    hf, vllm = got["hf"], got["vllm"]
    assert hf[0].shape == vllm[0].shape == (len(PROMPTS), len(ids))
    assert hf[1].shape == vllm[1].shape == (len(PROMPTS), len(words))
    for mine, theirs in zip(vllm[:3], hf[:3]):
        assert (mine <= 0).all() and (mine - theirs).abs().max() < 1e-3
    # a continuation of several tokens is its tokens' sum, not its first token's alone
    first = {w: p[0] for w, p in zip(words, pieces)}
    column = ids.index(first["photosynthesis"])
    assert (vllm[1][:, words.index("photosynthesis")] < vllm[0][:, column] - 1e-3).all()
    assert vllm[3] == hf[3] and len(vllm[3]) == len(histories)
    # the skill metrics' ranks (the judge's clue rank, the defender's guess rank) are the same on both
    assert vllm[4] == hf[4] and vllm[5] == hf[5] and len(vllm[5]) == len(clues)
