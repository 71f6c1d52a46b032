"""bench/play.py: every side plays its games at toy size, and what each library side is said to be unable to
keep of ``spag play``'s needs (its ``CANNOT_KEEP``) is tried here, so a release that changes one fails.
bench/gpu.py: every part of the GPU check runs at toy size (``--cpu``), and a part that fails or hangs leaves
the parts before it in the JSON and the next part to run.

Slow tier, but for the GPU check's failing parts: the toy runs start a process per side or part (vLLM's
engine among them), and the other tests build scripted models and run transformers' continuous batching.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spag.game.taboo.prompts import build_prompt
from spag.game.taboo.replies import STOPS
from spag.players import load_player
from spag.testing import load_script, make_scripted_checkpoint, make_tiny_checkpoint

PLAY = Path(__file__).resolve().parent.parent / "bench" / "play.py"
GPU_CHECK = PLAY.parent / "gpu.py"
HISTORY = [{"role": "attacker", "content": "What do you drink in the morning to wake up?"}]
PROMPTS = [build_prompt("attacker", "coffee", [], 3), build_prompt("defender", "coffee", HISTORY, 3)]


def run_bench(script: str, *arguments) -> subprocess.CompletedProcess:
    """``bench/SCRIPT ARGUMENTS`` run to its end; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(PLAY.parent / script), *map(str, arguments)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def bench():
    """bench/play.py as a module (imported when a test needs it, not when the tests are collected)."""
    return load_script(PLAY, "bench_play")


# The sides the GPU check plays itself, through bench/play.py's run_side, in its play-embedded part (batched,
# generate, generate_batch) and its play-b32 part (counter, static): the toy run below plays the others, each
# in a process of its own as the bench runs every side, with the engine they are compared against.
CHECKED_SIDES = ("counter", "static", "generate", "generate_batch")


@pytest.mark.slow
def test_every_side_of_the_play_bench_plays_its_games_at_toy_size(bench):
    """With the GPU check's toy run (below), every side of bench/play.py plays at toy size."""
    assert set(CHECKED_SIDES) < set(bench.SIDES)
    sides = [side for side in bench.SIDES if side not in CHECKED_SIDES]
    done = subprocess.run(
        [sys.executable, str(PLAY), "--toy", "--json", "--sides", ",".join(sides)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["toy"] and figures["dtype"] == "float32"
    assert list(figures["sides"]) == sides
    for side, total in figures["sides"].items():
        assert total["episodes"] > 0 and total["utterances"] >= total["episodes"], side
        assert total["generated_tokens"] > 0 and total["prompt_tokens"] > 0, side
        assert total["episodes_per_s"] > 0 and total["generated_tokens_per_s"] > 0, side
        assert total["cannot_keep"] == bench.CANNOT_KEEP[side], side
    assert figures["sides"]["baseline"]["episodes"] == bench.TOY["baseline_words"]
    assert set(figures["library_paths"]) == set(bench.LIBRARY_SIDES) - set(CHECKED_SIDES)
    assert set(figures["ratios"]) == {f"batched_vs_{side}" for side in sides if side != "batched"}


# ----------------------------------------------------------------------- what each library side keeps


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    """Players on tiny models whose greedy reply is a script: one that writes the other player's line,
    one that ends its turn at once."""
    root = tmp_path_factory.mktemp("scripted")
    speaker = make_scripted_checkpoint(root / "speaker", "Think of tea\ndefender: coffee is it")
    eager_end = make_scripted_checkpoint(root / "eager_end", "")
    return {
        name: load_player(str(path), "hf", device="cpu", dtype="float32")
        for name, path in (("speaker", speaker), ("eager_end", eager_end))
    }


@pytest.fixture(scope="module")
def random_player(tmp_path_factory):
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("random") / "ckpt")
    return load_player(str(path), "hf", device="cpu", dtype="float32")


SIDES = {
    "batched": lambda bench, player: player,
    "generate": lambda bench, player: bench.GeneratePlayer(player),
    "generate_batch": lambda bench, player: bench.GenerateBatchPlayer(player),
}


def _replies(bench, side: str, player, prompts, **options):
    options = {"temperature": 0, "max_new_tokens": 16, "min_new_tokens": 0, **options}
    return SIDES[side](bench, player).generate(prompts, **options)


@pytest.mark.slow
@pytest.mark.parametrize(
    "stops",
    [
        {"stop": STOPS.strings, "stop_pattern": STOPS.pattern},
        {"stop": (), "stop_pattern": STOPS.pattern},
        {"stop": ("\ndefender:",)},
    ],
    ids=["game", "pattern", "string"],
)
def test_model_generate_ends_a_reply_at_the_stops_as_the_engine_does(bench, scripted, stops):
    engine = _replies(bench, "batched", scripted["speaker"], PROMPTS, **stops)
    generate = _replies(bench, "generate", scripted["speaker"], PROMPTS, **stops)
    assert [r.text.strip() for r in engine] == ["Think of tea"] * 2
    assert generate == engine  # text, tokens spent and finish reason
    assert all(r.finish_reason == "stop" for r in generate)


@pytest.mark.slow
def test_generate_batch_runs_on_past_a_stop_and_cuts_after(bench, scripted):
    """CANNOT_KEEP["generate_batch"]["stop_strings"] and ["stop_pattern"]."""
    speaker = scripted["speaker"]
    script = len(
        speaker.tokenizer("Think of tea\ndefender: coffee is it", add_special_tokens=False)["input_ids"]
    )
    engine = _replies(bench, "batched", speaker, PROMPTS, stop=STOPS.strings, stop_pattern=STOPS.pattern)
    side = bench.GenerateBatchPlayer(speaker)
    batch = side.generate(
        PROMPTS,
        temperature=0,
        max_new_tokens=16,
        min_new_tokens=0,
        stop=STOPS.strings,
        stop_pattern=STOPS.pattern,
    )
    assert [r.text for r in batch] == [r.text for r in engine]
    assert all(r.finish_reason == "stop" for r in batch)
    assert all(
        r.n_tokens == script > e.n_tokens for r, e in zip(batch, engine)
    )  # the whole script, end to end
    assert side.tokens_past_stop() == sum(r.n_tokens - e.n_tokens for r, e in zip(batch, engine))


@pytest.mark.slow
def test_generate_batch_drops_min_new_tokens(bench, scripted):
    """CANNOT_KEEP["generate_batch"]["min_new_tokens"]: a model that ends its turn at once says nothing."""
    eager = scripted["eager_end"]
    for side in ("batched", "generate"):
        assert [r.n_tokens for r in _replies(bench, side, eager, PROMPTS, min_new_tokens=3)] == [3, 3], side
    assert [r.n_tokens for r in _replies(bench, "generate_batch", eager, PROMPTS, min_new_tokens=3)] == [0, 0]


@pytest.mark.slow
def test_only_the_engine_gives_each_game_its_own_seeded_sampling(bench, random_player):
    """CANNOT_KEEP[...]["per_game_seeds"] (and so ["resume"]): with its own seed first in both calls, a
    prompt gets the same reply alone and beside another game from the engine only."""
    sampling = {"temperature": 1.2, "top_k": 50, "min_new_tokens": 8, "max_new_tokens": 8}
    for side in SIDES:
        (alone,) = _replies(bench, side, random_player, PROMPTS[:1], seed=[7], **sampling)
        beside = _replies(bench, side, random_player, PROMPTS, seed=[7, 8], **sampling)[0]
        assert (alone.text == beside.text) == (side == "batched"), side
        assert bool(bench.CANNOT_KEEP[side]) == (side != "batched")


# ----------------------------------------------------------------------- bench/gpu.py, the GPU check


def _gpu_check(out: Path, *arguments: str, **env: str):
    return subprocess.Popen(
        [sys.executable, str(GPU_CHECK), "--out", str(out), *arguments],
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
    )


@pytest.mark.slow
def test_every_part_of_the_gpu_check_runs_at_toy_size(tmp_path):
    """The whole check, as on the GPU image (tests/test_light_core.py): from the source tree, spag's installed
    copy hidden and the packages the image lacks absent; no part loads one of the heavy packages."""
    from test_light_core import heavy_loaded, light_environment

    out, reports = tmp_path / "check.json", tmp_path / "reports"
    done = _gpu_check(out, "--cpu", **light_environment(reports, tmp_path / "cache"))
    said, _ = done.communicate(timeout=900)
    check = json.loads(out.read_text())
    assert done.returncode == 0, said[-3000:] + json.dumps(
        {p: e.get("error") for p, e in check["parts"].items()}
    )
    assert check["check"] == "bench/gpu.py" and check["cpu_mode"] and check["finished"]
    parts = [
        "device",
        "ceilings",
        "decode-step",
        "play-b32",
        "play-b128",
        "play-b512",
        "sft-kl-8x2048",
        "sft-kl-16x2048",
        "offline-po-8x2048",
        "offline-po-16x2048",
        "offline-po-zero3-8x2048",
        "lora-llama-7b-8x2048",
        "sft-kl-rows-32",
        "preflight",
        "play-embedded",
        "online",
    ]
    assert list(check["parts"]) == parts
    for part, entry in check["parts"].items():
        assert entry["status"] == "ok" and entry["exit_code"] == 0, part
        assert entry["result"]["heavy_modules"] == [], part  # each part a fork: its own record
    assert {argv: names for argv, names in heavy_loaded(reports).items() if names} == {}
    assert set(check["shapes"]) == {"embedded", "qwen2.5-1.5b", "llama-7b"}
    for name, shape in check["shapes"].items():
        assert shape["parameters"] > 0 and shape["layers"] == 2 and shape["hidden_size"] == 64
        # the embedded model's tokenizer's vocabulary, or Qwen2.5's own
        assert shape["vocab_size"] == (151936 if name == "qwen2.5-1.5b" else 49152)
    ceilings = check["parts"]["ceilings"]["result"]
    assert ceilings["matmul"]["tflops"] > 0 and ceilings["copy"]["tbs"] > 0
    decode = check["parts"]["decode-step"]["result"]
    assert list(decode["sides"]) == ["engine", "decoder_generate", "generate", "generate_static"]
    assert not decode["errors"]
    for side in decode["sides"].values():
        assert side["step_ms"] > 0 and side["seconds"]["long"] > 0
    for side in ("decoder_generate", "generate_static"):
        assert decode["sides"][side]["compiled"] is False  # transformers compiles on a GPU only
    for part, batch in (("play-embedded", 32), ("play-b32", 32), ("play-b128", 128), ("play-b512", 512)):
        result = check["parts"][part]["result"]
        # the engine's own decoding loop, not its fallback to model.generate
        assert result["engine"]["path"] == "fast" and result["engine"]["transformers"]
        sides = (
            ["batched", "generate", "generate_batch"]
            if part == "play-embedded"
            else ["counter", "generate", "static"]
            if part == "play-b32"  # --cpu: the static side at the first batch only
            else ["counter", "generate"]
        )
        assert list(result["sides"]) == sides
        games = 2 if part == "play-embedded" else batch // 16
        for side in result["sides"].values():
            assert side["episodes"] == games and side["generated_tokens"] > 0 and side["forward_passes"] > 0
            assert side["episodes_per_s"] > 0 and "bandwidth_utilisation" in side
        assert result["sides"][sides[0]]["memory"]["planned_gib"] > 0 and result["engine_over_generate"] > 0
        if part == "play-embedded":  # what generate_batch ran on past a stop, as bench/play.py reports it
            assert result["sides"]["generate_batch"]["tokens_past_stop"] >= 0
        if part == "play-b32":  # decoder: generate plays the counter engine's games
            assert result["sides"]["static"]["games_sha256"] == result["sides"]["counter"]["games_sha256"]
        assert "partial" not in result
    for part in parts[6:12]:
        result = check["parts"][part]["result"]
        assert result["steps"] == 3 and result["tokens"] > 0 and result["steady_tokens_per_s"] > 0, part
        assert result["memory"]["planned_gib"] > 0 and "mfu" in result, part
        assert result["rows_per_step"] == (4 if "16x" in part else 2), part
        assert result["longest_batch_tokens"] == 64, part  # rows cut from the left to max_length
    for part in parts[8:12]:
        assert check["parts"][part]["result"]["reference"]["mode"] == "on-the-fly", part
    assert check["parts"]["sft-kl-8x2048"]["result"]["reference"]["mode"] == "precomputed"
    for part in parts[6:12]:  # DeepSpeed in the ZeRO-3 part alone
        assert check["parts"][part]["result"]["deepspeed"] is ("zero3" in part), part
    assert check["parts"]["lora-llama-7b-8x2048"]["result"]["lora"]["parameters"] > 0
    rows = check["parts"]["sft-kl-rows-32"]["result"]
    assert (
        list(rows["sides"]) == ["padded", "padding_free", "rebalanced"]
        and rows["padding_free_over_padded"] > 0
    )
    assert rows["rebalanced_over_padding_free"] > 0
    rebalanced = rows["sides"]["rebalanced"]  # the step's 8 rows in 4 micro-batches of balanced cost
    assert rebalanced["rows_per_step"] < 8 and rebalanced["steps"] == rows["sides"]["padding_free"]["steps"]
    padded, packed = rows["sides"]["padded"], rows["sides"]["padding_free"]
    # the same rows, steps and tokens either way; the padded batches computed some padding
    assert (padded["steps"], padded["tokens"]) == (packed["steps"], packed["tokens"]) and packed["tokens"] > 0
    assert 0 < padded["padding_share"] < 1 and padded["rows_per_step"] == 8
    online = check["parts"]["online"]["result"]
    assert online["steps"] == 1 and online["games"] > 0 and online["generated_tokens"] > 0
    # bench/epoch.py reads the check it wrote: the one-GPU preset's epoch from these (toy) rates
    said = run_bench("epoch.py", out, "--json", tmp_path / "epoch.json").stdout
    figures = json.loads((tmp_path / "epoch.json").read_text())
    assert "a --cpu check" in said and figures["check"]["device"] == "cpu"
    counter = check["parts"]["play-b512"]["result"]["sides"]["counter"]["generated_tokens_per_s"]
    trained = check["parts"]["offline-po-8x2048"]["result"]["steady_tokens_per_s"]
    assert figures["stages"]["play@N"]["tokens_per_s"] == round(counter, 1)
    assert figures["stages"]["train@N"]["tokens_per_s"] == round(trained, 1)


def test_a_failing_part_keeps_the_parts_before_it_and_the_next_part_runs(tmp_path):
    out = tmp_path / "check.json"
    run = _gpu_check(
        out,
        "--cpu",
        "--parts",
        "device,sft-kl-8x2048,online",
        "--spawn",  # each part a new Python process, as on a GPU
        "--timeout",
        "online=1",
        SPAG_GPU_CHECK_FAULT="sft-kl-8x2048=crash,online=hang",
    )
    written = None
    while run.poll() is None:  # the JSON holds each part as soon as it has run, before the check ends
        if out.is_file() and "sft-kl-8x2048" in json.loads(out.read_text())["parts"]:
            written = json.loads(out.read_text())
            break
        time.sleep(0.1)
    said, _ = run.communicate(timeout=60)
    assert written is not None and run.returncode == 1, said
    assert not written["finished"] and list(written["parts"]) == ["device", "sft-kl-8x2048"]
    check = json.loads(out.read_text())
    device, crashed, hung = (check["parts"][p] for p in ("device", "sft-kl-8x2048", "online"))
    assert (
        device["status"] == "ok"
        and device["result"]["name"] == "cpu"
        and device["result"]["versions"]["torch"]
    )
    assert isinstance(device["result"]["heavy_modules"], list)
    assert crashed["status"] == "failed" and "forced failure of part sft-kl-8x2048" in crashed["error"]
    assert any("forced failure" in line for line in crashed["output_tail"] + crashed["result"]["traceback"])
    assert hung["status"] == "timeout" and hung["limit_s"] == 1 and "result" not in hung
    assert check["finished"] and "failed: sft-kl-8x2048, online" in said


def test_a_forked_part_that_fails_or_hangs_is_recorded_as_a_spawned_one_is(tmp_path):
    """--cpu runs each part in a fork of the check (its imports done once): a part that raises is failed,
    one that hangs is killed at its limit with whatever it started, and the check goes on."""
    out = tmp_path / "check.json"
    said, _ = _gpu_check(
        out,
        "--cpu",
        "--parts",
        "device,ceilings,online",
        "--timeout",
        "online=2",
        SPAG_GPU_CHECK_FAULT="device=crash,online=hang",
    ).communicate(timeout=120)
    check = json.loads(out.read_text())
    crashed, ran, hung = (check["parts"][p] for p in ("device", "ceilings", "online"))
    assert crashed["status"] == "failed" and "forced failure of part device" in crashed["error"], said
    assert ran["status"] == "ok" and ran["result"]["matmul"]["tflops"] > 0
    assert hung["status"] == "timeout" and hung["exit_code"] is None and hung["seconds"] < 10
    assert check["finished"] and "failed: device, online" in said


def test_parts_past_the_checks_budget_are_skipped_and_said(tmp_path):
    out = tmp_path / "check.json"
    said, _ = _gpu_check(out, "--cpu", "--parts", "device,online", "--budget", "4").communicate(timeout=60)
    check = json.loads(out.read_text())
    assert [entry["status"] for entry in check["parts"].values()] == ["skipped", "skipped"], said
    assert "budget of 4 s" in check["parts"]["online"]["error"] and check["finished"]


def test_the_check_replaces_no_file_but_its_own_json(tmp_path):
    other = tmp_path / "notes.json"
    other.write_text('{"mine": 1}')
    done = _gpu_check(other, "--cpu", "--parts", "device", "--budget", "4")
    said, _ = done.communicate(timeout=60)
    assert done.returncode == 2 and said.strip().splitlines() == [
        f"error: --out {other}: something is there that is not this check's JSON; choose another path"
    ]
    assert other.read_text() == '{"mine": 1}'
    # its own JSON, from an earlier run, it replaces
    ours = tmp_path / "check.json"
    for run in range(2):
        said, _ = _gpu_check(ours, "--cpu", "--parts", "device", "--budget", "4").communicate(timeout=60)
        assert json.loads(ours.read_text())["check"] == "bench/gpu.py", (run, said)
        assert "error" not in said, said


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--parts", ""], "--parts: name at least one part"),
        (["--timeout", "abc"], "--timeout abc: 'abc' is not a number of seconds"),
        (["--timeout", "x=5"], "--timeout x=5: x is not a part"),
        (["--timeout", "-3"], "--timeout -3: a part needs a positive, finite number of seconds"),
        (["--budget", "0"], "--budget 0: give a positive, finite number of seconds"),
        (["--out", "/dev/zero"], "--out /dev/zero: something is there that is not this check's JSON"),
        (["--out", "FIFO"], "something is there that is not this check's JSON"),
        (["--out", "DANGLING"], "--out"),
    ],
)
def test_bad_arguments_of_the_gpu_check_are_one_line_and_never_a_hang(tmp_path, arguments, message):
    """M11-M12 (fourth attack): --parts '', --budget 1, --timeout abc, a dangling or read-only --out ended in
    tracebacks; --out a FIFO waited forever, --out /dev/zero read until memory ran out."""
    if "FIFO" in arguments:
        os.mkfifo(tmp_path / "fifo")
        arguments = ["--out", str(tmp_path / "fifo")]
    if "DANGLING" in arguments:
        (tmp_path / "link.json").symlink_to(tmp_path / "nowhere" / "check.json")
        arguments = ["--out", str(tmp_path / "link.json")]
    out = ["--out", str(tmp_path / "check.json")] if "--out" not in arguments else []
    done = subprocess.run(
        [sys.executable, str(GPU_CHECK), "--cpu", *out, *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stderr.strip().splitlines()
    assert (
        done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    ), lines
    assert not (tmp_path / "check.json").exists()


def test_a_budget_too_short_for_any_part_skips_them_all_and_says_so(tmp_path):
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, str(GPU_CHECK), "--cpu", "--out", str(out), "--parts", "device", "--budget", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        "Traceback" not in done.stderr
        and json.loads(out.read_text())["parts"]["device"]["status"] == "skipped"
    )
    assert "0 of 1 parts ran" in done.stdout


# ------------------------------------------- bench/train.py and bench/benchmark.py at toy size


@pytest.mark.slow
def test_the_training_bench_runs_every_setting_at_toy_size(tmp_path):
    """bench/train.py on a tiny model: each setting in its own process, the padded batches beside the rows
    grouped by length that a CPU run uses."""
    model = make_tiny_checkpoint(tmp_path / "tiny")
    done = run_bench("train.py", "--model", model, "--rows", 12, "--steps", 3, "--repeats", 1)
    table = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.split()}
    for setting in ("precomputed-cold", "precomputed-warm", "padded", "on-the-fly"):
        assert setting in table and float(table[setting][2]) > 0, done.stdout  # step tokens/s
    assert "rows grouped by length vs one padded batch per step:" in done.stdout


@pytest.mark.slow
def test_the_benchmark_bench_finds_both_models_agree_at_toy_size(tmp_path):
    """bench/benchmark.py on real items (the pinned artifacts) with a tiny model: lm-eval's own HF model
    and spag's shared-context one give every item the same result (the script exits otherwise)."""
    model = make_tiny_checkpoint(tmp_path / "tiny")
    done = subprocess.run(
        [sys.executable, str(PLAY.parent / "benchmark.py"), "--model", str(model), "--items", "6", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout[done.stdout.index("{") :])
    assert set(figures["tasks"]) == {"arc_easy", "piqa", "hellaswag"}
    for name, task in figures["tasks"].items():
        assert task["max_loglikelihood_difference"] < 1e-3, name
        assert task["lm-eval HFLM"]["items"] == task["spag shared contexts"]["items"] == 6, name
    assert figures["panel"]["items"] == 18 and figures["panel"]["wall_s"] > 0


# ----------------------------------------------------------------- bench/linear.py at toy size


def test_the_linear_bench_measures_every_product_at_toy_size():
    """bench/linear.py: the three products a CPU linear layer chooses between, each checked against
    ``x @ Wᵀ`` and timed, for every shape and number of rows."""
    done = subprocess.run(
        [sys.executable, str(PLAY.parent / "linear.py"), "--toy"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert len(rows) == 4, done.stdout  # two shapes x two numbers of rows
    for row in rows:
        rates = [float(value) for value in row[4:7]]
        assert all(rate > 0 for rate in rates) and row[-1].endswith("x"), row
    assert done.stdout.strip().splitlines()[-1] == "bench/linear: 4 products measured"


# ------------------------------------------------------------------ bench/skill.py at toy size


@pytest.mark.slow
def test_the_skill_bench_scores_alike_on_every_side_at_toy_size(tmp_path):
    """bench/skill.py on a tiny model: each prompt run whole, the shared beginning, and the vllm player
    (vLLM's CPU build) score the same candidates to 1e-3 (the script exits otherwise), each side timed."""
    model = make_tiny_checkpoint(tmp_path / "tiny", heads=2)  # vLLM's CPU attention: head size >= 32
    done = run_bench("skill.py", "--model", model, "--words", 3, "--rounds", 1, "--vllm", "--json")
    figures = json.loads(done.stdout[done.stdout.index("{") : done.stdout.rindex("}") + 1])
    assert figures["prompts"] == figures["candidates"] == 3 and figures["max_logprob_difference"] < 1e-3
    assert min(figures[f"{side}_s_per_prompt"] for side in ("plain", "shared", "vllm")) > 0
    assert figures["vllm_over_shared"] > 0 and done.stdout.strip().splitlines()[-1].startswith(
        "[bench/skill]"
    )


# ------------------------- bench/judge.py, reward.py, analyze.py, online.py and bf16_rounding.py at toy size


def test_the_judge_bench_judges_every_outcome_at_toy_size():
    """bench/judge.py on a small corpus: every outcome is in it, and the judge's rate is measured."""
    done = run_bench("judge.py", "--episodes", 400, "--words", 40)
    outcomes = next(line for line in done.stdout.splitlines() if line.startswith("outcomes: "))
    for outcome in ("attacker_wins", "defender_wins", "tie", "attacker_breaks_rules"):
        assert f"'{outcome}'" in outcomes, done.stdout
    rate = next(line for line in done.stdout.splitlines() if line.startswith("judge: "))
    assert float(rate.split()[1].replace(",", "")) > 0, done.stdout


def test_the_reward_bench_runs_spag_reward_on_its_corpus_at_toy_size(tmp_path):
    """bench/reward.py: `spag reward` on the judge bench's corpus, its rows kept where --keep says."""
    done = run_bench("reward.py", "--episodes", 300, "--words", 30, "--repeats", 1, "--keep", tmp_path)
    assert (tmp_path / "episodes.parquet").is_file() and (tmp_path / "rows.parquet").is_file()
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith("its summary: [spag reward] 300 records"), done.stdout


def test_the_analyze_bench_runs_every_named_query_at_toy_size(tmp_path):
    """bench/analyze.py on a few thousand episodes: every named query runs and is timed against its limit;
    rules_diff, which judges every episode by both rule sets, gets the judge's time for them."""
    from spag.analyze import named_queries

    done = run_bench("analyze.py", "--episodes", 3000, "--shards", 3, "--repeat", 1, "--limit", 60)
    table = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.split()}
    for name in named_queries():
        assert table[name][-1] == "PASS" and float(table[name][-2]) == 60.0, done.stdout
    assert done.stdout.strip().splitlines()[-1] == (
        f"[bench/analyze] {len(named_queries())} of {len(named_queries())} queries within their limits"
    )
    # A query that judges gets 2 judgements an episode at the judge's 20,000 episodes/s; one over it fails.
    done = subprocess.run(
        [sys.executable, str(PLAY.parent / "analyze.py"), "--episodes", "3000", "--shards", "1", "--repeat", "1",
         "--limit", "0.1", "--query", "rules_diff"],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    row = next(line.split() for line in done.stdout.splitlines() if line.startswith("rules_diff"))
    assert (done.returncode, row[-2], row[-1]) == (1, "0.3", "FAIL"), done.stdout + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[bench/analyze] 0 of 1 queries within their limits"


@pytest.mark.slow
def test_the_online_bench_times_its_steps_at_toy_size(tmp_path):
    """bench/online.py on a tiny model: two optimiser steps of online self-play, each timed, their games
    played, and an epoch's time estimated from them."""
    model = make_tiny_checkpoint(tmp_path / "tiny")
    out = tmp_path / "online.json"
    run_bench("online.py", "--model", model, "--steps", 2, "--words-per-step", 2, "--games-per-word", 1,
              "--json", out)  # fmt: skip
    figures = json.loads(out.read_text())
    assert (figures["steps"], figures["games_per_step"]) == (2, 2), figures
    assert figures["step_seconds"] > 0 and figures["play_seconds"] > 0 and figures["epoch_minutes"] > 0


def test_the_bf16_rounding_bench_tells_updates_below_bfloat16s_step_from_those_above(tmp_path):
    """bench/bf16_rounding.py on a checkpoint and two updates of it: one far below bfloat16's relative step
    of 2^-8 (almost every weight changes in float32, few once cast), one far above (most stay changed)."""
    import torch
    from safetensors.torch import load_file, save_file

    before = make_tiny_checkpoint(tmp_path / "before")
    weights = load_file(before / "model.safetensors")
    shares = {}
    for name, step in (("small", 2.0**-14), ("large", 2.0**-4)):
        after = tmp_path / name
        after.mkdir()
        save_file(
            {k: (v.float() * (1 + step)).to(v.dtype) for k, v in weights.items()}, after / "model.safetensors"
        )
        done = run_bench("bf16_rounding.py", before, after)
        line = next(line for line in done.stdout.splitlines() if line.startswith("changed in float32: "))
        shares[name] = [float(part.rstrip("%;")) for part in line.split() if part.rstrip("%;")[-1:].isdigit()]
    assert weights and all(t.dtype == torch.float32 for t in weights.values())
    assert shares["small"][0] > 90 and shares["small"][1] < 5, shares
    assert shares["large"][0] > 90 and shares["large"][1] > 90, shares


# ----------------------------------------------------------------------- bench/epoch.py, an epoch's time


@pytest.fixture(scope="module")
def epoch():
    """bench/epoch.py as a module."""
    return load_script(PLAY.parent / "epoch.py", "bench_epoch")


def _check(tmp_path, play=None, train=None) -> Path:
    """A GPU check's JSON with the play-bN and offline-po-Rx2048 rates given (generated or steady tokens/s)."""
    play = {32: 100.0, 128: 400.0, 512: 1000.0} if play is None else play
    train = {8: 5000.0, 16: 6000.0} if train is None else train
    parts = {"device": {"status": "ok", "result": {"name": "NVIDIA H100 80GB HBM3"}}}
    for n, rate in play.items():
        sides = {"counter": {"generated_tokens_per_s": rate}, "static": {"generated_tokens_per_s": 3 * rate}}
        parts[f"play-b{n}"] = {"status": "ok", "result": {"sides": sides}}
    for rows, rate in train.items():
        parts[f"offline-po-{rows}x2048"] = {
            "status": "ok",
            "result": {"steady_tokens_per_s": rate, "mfu": 0.3},
        }
    # neither is the stage's setting: ZeRO-3, and a part that failed
    parts["offline-po-zero3-8x2048"] = {"status": "ok", "result": {"steady_tokens_per_s": 1.0, "mfu": 0.01}}
    parts["play-b1024"] = {
        "status": "failed",
        "result": {"sides": {"counter": {"generated_tokens_per_s": 1.0}}},
    }
    path = tmp_path / "check.json"
    path.write_text(
        json.dumps(
            {
                "check": "bench/gpu.py",
                "date": "2026-12-06",
                "cpu_mode": False,
                "spag": "0.1.0",
                "parts": parts,
            }
        )
    )
    return path


def test_an_epochs_time_is_the_presets_work_over_the_checks_rates(epoch, tmp_path, capsys):
    check = _check(tmp_path)
    assert epoch.main([str(check), "--json", str(tmp_path / "e.json")]) == 0
    said = capsys.readouterr().out
    figures = json.loads((tmp_path / "e.json").read_text())
    play, train, evaluate = (figures["stages"][s] for s in ("play@N", "train@N", "evaluate@N"))
    # one-gpu.yaml: 12,000 words of 5 turns, 1,024 games at once (the b512 part: the largest it reaches)
    assert play["tokens"] == 12000 * 10 * 120 and play["tokens_per_s"] == 1000.0
    assert play["hours"] == pytest.approx(12000 * 10 * 120 / 1000 / 3600)
    assert play["source"].startswith("play-b512") and "vllm" in play["notes"][0]
    # 4 rows a micro-batch: the 8-row part, not ZeRO-3's; LoRA makes it an upper bound
    assert train["tokens"] == 12000 * 2.5 * 600 + 12000 * 250 and train["tokens_per_s"] == 5000.0
    assert train["source"] == "offline-po-8x2048, MFU 0.3" and "LoRA" in train["notes"][0]
    # 250 words, both roles, against imitation and the previous epoch, 32 at once: the b32 part
    assert evaluate["tokens"] == 250 * 2 * 2 * 10 * 120 and evaluate["source"].startswith("play-b32")
    assert figures["epoch_hours"] == pytest.approx(play["hours"] + train["hours"])
    assert "H100" in said and said.splitlines()[-1].startswith("figures written to")
    # half the assumed reply length: half the playing time, the training's unchanged
    assert epoch.main([str(check), "--reply-tokens", "60", "--json", str(tmp_path / "half.json")]) == 0
    half = json.loads((tmp_path / "half.json").read_text())["stages"]
    assert half["play@N"]["hours"] == pytest.approx(play["hours"] / 2)
    assert half["train@N"]["hours"] == train["hours"]


def test_an_epoch_on_the_hf_backends_decoder_generate_takes_the_static_sides_rate(epoch, tmp_path, capsys):
    override = tmp_path / "hf.yaml"
    override.write_text("play.backend: hf\nplay.decoder: generate\nplay.batch_size: 100\n")
    one_gpu = Path(epoch.ROOT) / "configs" / "one-gpu.yaml"
    args = [str(_check(tmp_path)), "--override", str(one_gpu), "--override", str(override)]
    assert epoch.main([*args, "--json", str(tmp_path / "e.json")]) == 0
    play = json.loads((tmp_path / "e.json").read_text())["stages"]["play@N"]
    assert play["source"] == "play-b32, the hf engine's 'static' side" and play["tokens_per_s"] == 300.0
    assert play["notes"] == []  # the hf backend: its own rate
    assert "hf.yaml" in capsys.readouterr().out


@pytest.mark.parametrize(
    "case, message",
    [
        ("no-play", "play@N: no play-bN part of the check measured the 'counter' side"),
        ("no-train", "train@N: no offline-po-Rx2048 part of the check finished with a rate"),
        ("not-a-check", "not a GPU check's JSON"),
        ("kuhn", "game.name: kuhn-poker"),
        ("online", "spag.method: online"),
        ("assumption", "--rows-per-game: must be above 0"),
        ("bad-override", "bad.yaml"),
    ],
)
def test_an_estimate_without_a_figure_is_one_line_and_exit_2(epoch, tmp_path, capsys, case, message):
    check = _check(tmp_path, play={} if case == "no-play" else None, train={} if case == "no-train" else None)
    args = [str(check)]
    configs = Path(epoch.ROOT) / "configs"
    if case == "not-a-check":
        check.write_text('{"parts": {}}')
    elif case in ("kuhn", "online"):
        args += ["--override", str(configs / ("kuhn-poker.yaml" if case == "kuhn" else "online.yaml"))]
    elif case == "assumption":
        args += ["--rows-per-game", "0"]
    elif case == "bad-override":
        (tmp_path / "bad.yaml").write_text("play.wordz: 3\n")
        args += ["--override", str(tmp_path / "bad.yaml")]
    assert epoch.main(args) == 2
    out, err = capsys.readouterr()
    assert message in err and len(err.strip().splitlines()) == 1 and out == ""


def test_an_estimate_replaces_only_its_own_earlier_figures(epoch, tmp_path, capsys):
    check = _check(tmp_path)
    before = check.read_bytes()
    assert epoch.main([str(check), "--json", str(check)]) == 2  # the check it reads: kept as it was
    assert check.read_bytes() == before and "not replaced" in capsys.readouterr().err
    other = tmp_path / "notes.json"
    other.write_text('{"mine": 1}')
    assert epoch.main([str(check), "--json", str(other)]) == 2 and other.read_text() == '{"mine": 1}'
    ours = tmp_path / "epoch.json"
    assert epoch.main([str(check), "--json", str(ours)]) == 0
    assert epoch.main([str(check), "--reply-tokens", "60", "--json", str(ours)]) == 0  # its own: replaced
    assert json.loads(ours.read_text())["assumed"]["reply_tokens"] == 60
    capsys.readouterr()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert epoch.main([str(check), "--json", str(fifo)]) == 2 and fifo.is_fifo()  # not read: no hang
    assert "not replaced" in capsys.readouterr().err
    assert epoch.main([str(check), "--json", str(other / "inside.json")]) == 2  # a file is no folder
    err = capsys.readouterr().err
    assert "inside.json" in err and len(err.strip().splitlines()) == 1
