"""Self-play collection speed: the batched engine against a one-game-at-a-time baseline.

    python bench/play.py [--model DIR] [--words 32] [--max-turns 3] [--max-new-tokens 32]
                         [--batch-size 32] [--temperature 1.2] [--top-k 50] [--seed 0]
                         [--dtype auto|bfloat16|float32] [--threads N] [--baseline-words N] [--rounds 2]

Target: the batched engine collects episodes at least 10x faster than the baseline on CPU with the
embedded model (SmolLM2-135M-Instruct; 32 words, 3 turns).

The baseline is how the original project collected episodes: one game at a time, and at every turn
the whole prompt encoded again and handed to ``model.generate`` at batch size 1. Both sides of the
comparison use the same model and dtype, the same words, prompts, max_new_tokens, min_new_tokens,
sampling settings and stop strings, and the same judge; only the engine differs. Also printed: the
generated tokens/s of each, and as the ceiling the model's forward-pass tokens/s (a batch of long
prompts through the model, no generation) on this machine, in this run.

The two sides alternate (``--rounds``, default 2): the batched engine plays all the words, then the
baseline the next slice of its words, and so on; the speed-up compares each side's episodes per
second over all its rounds. A machine whose speed drifts during the run then slows both sides alike,
not only the one that happened to run later. Every round starts from an empty prompt store and
plays the same games.

One-time setup is done before either side is timed, and its time printed: the player is loaded as
``spag play`` loads it (``load_player``, which hashes the model's files for the episode records), and
the judge's word-form tables are read. Whichever side ran first would otherwise pay these alone.

The baseline is slow (seconds per utterance on a small CPU: about 6 minutes for 32 words), so
``--baseline-words 8`` plays only the first 8 of the words; the comparison is per episode and per
utterance either way. Wall-clock and process CPU seconds are both reported: on a shared machine the CPU time is the
steadier measure, and ``--threads 1`` avoids thread-synchronisation stalls under contention.

Without --model the embedded model is materialised once into ~/.cache/spag/SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path


def embedded_model() -> Path:
    from spag.base_model import MODEL_NAME, cache_dir, materialize_base_model

    path = cache_dir() / MODEL_NAME
    if not (path / "config.json").exists():
        print(f"materialising the embedded model into {path} ...", file=sys.stderr)
        materialize_base_model(path)
    return path


def play_baseline(model, tokenizer, words, config):
    """One game at a time; each turn re-encodes the full prompt and calls model.generate (batch 1)."""
    import torch

    from spag.game.prompts import build_prompt, has_chat_template, next_role, to_model_input
    from spag.game.rules import judge
    from spag.players import STOP_STRINGS, clean_reply, derive_seed

    episodes, tokens = [], 0
    end_ids = sorted(set(tokenizer.all_special_ids) | {tokenizer.eos_token_id})
    for index, word in enumerate(words):
        history = []
        while len(history) < 2 * config.max_turns:
            prompt = build_prompt(next_role(history), word, history, config.max_turns, config.template)
            text = to_model_input(tokenizer, prompt)
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=not has_chat_template(tokenizer))
            torch.manual_seed(derive_seed(config.seed, index, len(history), 0))
            sampling = (dict(do_sample=True, temperature=config.temperature, top_k=config.top_k or None)
                        if config.temperature > 0 else dict(do_sample=False))
            with torch.inference_mode():
                out = model.generate(**ids, max_new_tokens=config.max_new_tokens,
                                     min_new_tokens=config.min_new_tokens, eos_token_id=end_ids,
                                     pad_token_id=tokenizer.pad_token_id, stop_strings=list(STOP_STRINGS),
                                     tokenizer=tokenizer, **sampling)
            new = out[0, ids["input_ids"].shape[1]:].tolist()
            tokens += len(new)
            reply = clean_reply(tokenizer.decode(new, skip_special_tokens=True))
            history.append({"role": next_role(history), "content": reply})
            if judge(word, history, config.max_turns).decided:
                break
        verdict = judge(word, history, config.max_turns)
        episodes.append({"target_word": word, "history": history, "outcome": verdict.outcome})
    return episodes, tokens


def forward_ceiling(model, tokenizer, seconds: float = 10.0, batch: int = 8, length: int = 256) -> float:
    """Tokens/s of plain forward passes over a batch of long inputs: what the hardware allows."""
    import torch

    ids = torch.randint(100, len(tokenizer) - 100, (batch, length), generator=torch.Generator().manual_seed(0))
    done, start = 0, time.perf_counter()
    with torch.inference_mode():
        model(input_ids=ids, logits_to_keep=1)  # warm-up
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            model(input_ids=ids, logits_to_keep=1)
            done += batch * length
    return done / (time.perf_counter() - start)


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
    parser.add_argument("--dtype", default="auto", help="auto (what the pipeline plays in: bfloat16 where the CPU "
                                                        "has it natively, else float32), bfloat16 or float32")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--baseline-words", type=int, default=32, help="words the baseline plays")
    parser.add_argument("--rounds", type=int, default=2, help="alternate the sides: the batched engine plays all "
                        "the words, then the baseline the next slice of its words, this many times")
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()

    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)

    from spag.game.rules import word_forms
    from spag.play import PlayConfig, PlayStats, play_games
    from spag.players import load_player
    from spag.words import top_words

    model_path = Path(args.model) if args.model else embedded_model()
    words = top_words(max(args.words, 1) * 4)[:: 4][: args.words]  # spread over the frequency list
    config = PlayConfig(max_turns=args.max_turns, temperature=args.temperature, top_k=args.top_k,
                        max_new_tokens=args.max_new_tokens, min_new_tokens=args.min_new_tokens,
                        seed=args.seed, batch_size=args.batch_size)
    setup = time.perf_counter()
    player = load_player(str(model_path), "hf", device="cpu", dtype=args.dtype)  # hashes the model, as spag play
    word_forms("setup")  # reads the judge's word-form tables, which both sides use
    setup = time.perf_counter() - setup
    print(f"model {model_path.name} ({sum(p.numel() for p in player.model.parameters()) / 1e6:.0f}M params, "
          f"{next(player.model.parameters()).dtype}), torch {torch.__version__}, transformers "
          f"{transformers.__version__} ({'batched engine' if player.fast else 'fallback: model.generate'}), "
          f"{torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; setup (load, model hash, judge "
          f"tables) {setup:.1f}s, not timed")
    print(f"{len(words)} words, max_turns {config.max_turns}, max_new_tokens {config.max_new_tokens}, "
          f"temperature {config.temperature}, top_k {config.top_k}, batch {config.batch_size}")

    ceiling = forward_ceiling(player.model, player.tokenizer)
    print(f"forward-pass ceiling: {ceiling:.0f} tokens/s (batch 8 x 256 tokens, no generation)")

    subset = [] if args.skip_baseline else words[: args.baseline_words]
    rounds = max(1, min(args.rounds, len(subset) or 1))
    slices = [subset[r * len(subset) // rounds : (r + 1) * len(subset) // rounds] for r in range(rounds)]
    fast = Counter()    # summed over rounds: episodes, utterances, tokens, wall and CPU seconds
    slow = Counter()
    first_games = None
    for r, part in enumerate(slices, 1):
        player._store.clear()  # every round starts cold: no prompt kept from the round before
        stats = PlayStats()
        before = dict(player.counters)
        wall, cpu = time.perf_counter(), time.process_time()
        batched = play_games(player, player, words, config, show_progress=False, stats=stats)
        fast_s, fast_cpu = time.perf_counter() - wall, time.process_time() - cpu
        fast_utt = sum(len(e["history"]) for e in batched)
        games = [(e["target_word"], e["outcome"], [u["content"] for u in e["history"]]) for e in batched]
        first_games = first_games or games
        fast.update(episodes=len(batched), utterances=fast_utt, tokens=stats.generated_tokens)
        fast.update({"wall": fast_s, "cpu": fast_cpu})
        encoded = player.counters["prompt_tokens"] - before["prompt_tokens"]
        reused = player.counters["reused_tokens"] - before["reused_tokens"]
        print(f"round {r} batched : {len(batched)} episodes, {fast_utt} utterances in {fast_s:.1f}s "
              f"({fast_cpu:.1f} CPU s) = {len(batched) / fast_s:.3f} episodes/s, "
              f"{stats.generated_tokens / fast_s:.1f} generated tokens/s ({stats.generated_tokens} tokens); prompt "
              f"tokens encoded {encoded}, reused {reused}; outcomes {dict(stats.outcomes)}; {stats.empty_replies} "
              f"empty, {stats.truncated_replies} truncated; same games as round 1: {games == first_games}")
        if not part:
            continue
        wall, cpu = time.perf_counter(), time.process_time()
        baseline, tokens = play_baseline(player.model, player.tokenizer, part, config)
        base_s, base_cpu = time.perf_counter() - wall, time.process_time() - cpu
        base_utt = sum(len(e["history"]) for e in baseline)
        slow.update(episodes=len(baseline), utterances=base_utt, tokens=tokens)
        slow.update({"wall": base_s, "cpu": base_cpu})
        print(f"round {r} baseline: {len(baseline)} episodes, {base_utt} utterances in {base_s:.1f}s "
              f"({base_cpu:.1f} CPU s) = {len(baseline) / base_s:.3f} episodes/s, {tokens / base_s:.1f} generated "
              f"tokens/s ({tokens} tokens); outcomes {dict(Counter(e['outcome'] for e in baseline))}; this round's "
              f"ratio {(len(batched) / fast_s) / (len(baseline) / base_s):.1f}x")
    if not slow:
        return

    def ratio(what: str, clock: str) -> str:
        return f"{(fast[what] / fast[clock]) / (slow[what] / slow[clock]):.1f}x"

    print(f"batched over {rounds} round(s): {fast['episodes'] / fast['wall']:.3f} episodes/s; baseline over "
          f"{slow['episodes']:.0f} words: {slow['episodes'] / slow['wall']:.3f} episodes/s")
    print(f"speed-up (wall clock): {ratio('episodes', 'wall')} episodes/s, {ratio('utterances', 'wall')} "
          f"utterances/s, {ratio('tokens', 'wall')} generated tokens/s")
    print(f"speed-up (CPU time):   {ratio('episodes', 'cpu')} episodes/s, {ratio('utterances', 'cpu')} "
          f"utterances/s  (target: 10x episodes/s); load average now {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
    main()
