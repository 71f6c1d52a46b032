"""bench/play.py: every side plays its games at toy size, and what each library side is said to be unable to
keep of ``spag play``'s needs (its ``CANNOT_KEEP``) is tried here, so a release that changes one fails.

Slow tier: the toy run starts a process per side (vLLM's engine among them), and the other tests build
scripted models and run transformers' continuous batching.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spag.game.taboo.prompts import build_prompt
from spag.game.taboo.replies import STOPS
from spag.players import load_player
from spag.testing import make_scripted_checkpoint, make_tiny_checkpoint

pytestmark = pytest.mark.slow

PLAY = Path(__file__).resolve().parent.parent / "bench" / "play.py"
HISTORY = [{"role": "attacker", "content": "What do you drink in the morning to wake up?"}]
PROMPTS = [build_prompt("attacker", "coffee", [], 3), build_prompt("defender", "coffee", HISTORY, 3)]


@pytest.fixture(scope="module")
def bench():
    """bench/play.py as a module (imported when a test needs it, not when the tests are collected)."""
    spec = importlib.util.spec_from_file_location("bench_play", PLAY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_side_of_the_play_bench_plays_its_games_at_toy_size(bench):
    done = subprocess.run([sys.executable, str(PLAY), "--toy", "--json"], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["toy"] and figures["dtype"] == "float32"
    assert list(figures["sides"]) == list(bench.SIDES)
    for side, total in figures["sides"].items():
        assert total["episodes"] > 0 and total["utterances"] >= total["episodes"], side
        assert total["generated_tokens"] > 0 and total["prompt_tokens"] > 0, side
        assert total["episodes_per_s"] > 0 and total["generated_tokens_per_s"] > 0, side
        assert total["cannot_keep"] == bench.CANNOT_KEEP[side], side
    assert figures["sides"]["baseline"]["episodes"] == bench.TOY["baseline_words"]
    assert "tokens_past_stop" in figures["sides"]["generate_batch"]
    assert set(figures["library_paths"]) == set(bench.LIBRARY_SIDES)
    assert set(figures["ratios"]) == {f"batched_vs_{side}" for side in bench.SIDES if side != "batched"}


# ----------------------------------------------------------------------- what each library side keeps


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    """Players on tiny models whose greedy reply is a script: one that writes the other player's line,
    one that ends its turn at once."""
    root = tmp_path_factory.mktemp("scripted")
    speaker = make_scripted_checkpoint(root / "speaker", "Think of tea\ndefender: coffee is it")
    eager_end = make_scripted_checkpoint(root / "eager_end", "")
    return {name: load_player(str(path), "hf", device="cpu", dtype="float32")
            for name, path in (("speaker", speaker), ("eager_end", eager_end))}


@pytest.fixture(scope="module")
def random_player(tmp_path_factory):
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("random") / "ckpt")
    return load_player(str(path), "hf", device="cpu", dtype="float32")


SIDES = {"batched": lambda bench, player: player, "generate": lambda bench, player: bench.GeneratePlayer(player),
         "generate_batch": lambda bench, player: bench.GenerateBatchPlayer(player)}


def _replies(bench, side: str, player, prompts, **options):
    options = {"temperature": 0, "max_new_tokens": 16, "min_new_tokens": 0, **options}
    return SIDES[side](bench, player).generate(prompts, **options)


@pytest.mark.parametrize("stops", [{"stop": STOPS.strings, "stop_pattern": STOPS.pattern},
                                   {"stop": (), "stop_pattern": STOPS.pattern}, {"stop": ("\ndefender:",)}],
                         ids=["game", "pattern", "string"])
def test_model_generate_ends_a_reply_at_the_stops_as_the_engine_does(bench, scripted, stops):
    engine = _replies(bench, "batched", scripted["speaker"], PROMPTS, **stops)
    generate = _replies(bench, "generate", scripted["speaker"], PROMPTS, **stops)
    assert [r.text.strip() for r in engine] == ["Think of tea"] * 2
    assert generate == engine  # text, tokens spent and finish reason
    assert all(r.finish_reason == "stop" for r in generate)


def test_generate_batch_runs_on_past_a_stop_and_cuts_after(bench, scripted):
    """CANNOT_KEEP["generate_batch"]["stop_strings"] and ["stop_pattern"]."""
    speaker = scripted["speaker"]
    script = len(speaker.tokenizer("Think of tea\ndefender: coffee is it", add_special_tokens=False)["input_ids"])
    engine = _replies(bench, "batched", speaker, PROMPTS, stop=STOPS.strings, stop_pattern=STOPS.pattern)
    side = bench.GenerateBatchPlayer(speaker)
    batch = side.generate(PROMPTS, temperature=0, max_new_tokens=16, min_new_tokens=0, stop=STOPS.strings,
                          stop_pattern=STOPS.pattern)
    assert [r.text for r in batch] == [r.text for r in engine]
    assert all(r.finish_reason == "stop" for r in batch)
    assert all(r.n_tokens == script > e.n_tokens for r, e in zip(batch, engine))  # the whole script, end to end
    assert side.tokens_past_stop() == sum(r.n_tokens - e.n_tokens for r, e in zip(batch, engine))


def test_generate_batch_drops_min_new_tokens(bench, scripted):
    """CANNOT_KEEP["generate_batch"]["min_new_tokens"]: a model that ends its turn at once says nothing."""
    eager = scripted["eager_end"]
    for side in ("batched", "generate"):
        assert [r.n_tokens for r in _replies(bench, side, eager, PROMPTS, min_new_tokens=3)] == [3, 3], side
    assert [r.n_tokens for r in _replies(bench, "generate_batch", eager, PROMPTS, min_new_tokens=3)] == [0, 0]


def test_only_the_engine_gives_each_game_its_own_seeded_sampling(bench, random_player):
    """CANNOT_KEEP[...]["per_game_seeds"] (and so ["resume"]): with its own seed first in both calls, a
    prompt gets the same reply alone and beside another game from the engine only."""
    sampling = {"temperature": 1.2, "top_k": 50, "min_new_tokens": 8, "max_new_tokens": 8}
    for side in SIDES:
        (alone,) = _replies(bench, side, random_player, PROMPTS[:1], seed=[7], **sampling)
        beside = _replies(bench, side, random_player, PROMPTS, seed=[7, 8], **sampling)[0]
        assert (alone.text == beside.text) == (side == "batched"), side
        assert bool(bench.CANNOT_KEEP[side]) == (side != "batched")
