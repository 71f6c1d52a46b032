"""Training speed and memory with precomputed versus on-the-fly reference log-probs, in one run.

    python bench/train.py [--model DIR] [--rows 64] [--steps 8] [--batch-size 4] [--max-length 512]

Each setting trains in its own child process (so that peak memory is that setting's own) on the same
synthetic game rows, with ``offline-po``:

- precomputed, cold: the reference pass runs first (one model at a time), then training;
- precomputed, warm: the cached reference log-probs are reused, training only;
- on the fly: the reference model runs beside the policy at every step (two models in memory);
- padded: precomputed and warm, but each step's batch runs padded to its longest row, as it does on a GPU
  (on a CPU the trainer runs a step's rows in groups of similar length: ``model_forward_logprobs``).

Reported per setting (best over ``--repeats`` alternating runs): training tokens/s as the median over
optimiser steps 2.. of (non-padding tokens / step time), read from the dvclive curves the trainer writes;
tokens/s over the Trainer's whole train runtime; the reference pass's seconds; the child's CPU seconds
(user + system, loading included: steadier than wall time on a busy machine); and peak memory (RSS of
the child on CPU, torch.cuda.max_memory_allocated on GPU). The model is ``--model``, else ``data/base/model`` (the embedded
SmolLM2-135M-Instruct, made by ``spag base-model``) when it exists, else a tiny random Llama, with a note.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "data" / "base" / "model"

SETTINGS = ("precomputed-cold", "precomputed-warm", "padded", "on-the-fly")

_WORDS = ["coffee", "river", "winter", "garden", "engine", "violin", "bridge", "candle", "harbor", "pepper"]
_LINES = [
    "What do people usually reach for when they wake up tired on a grey morning?",
    "Some prefer a warm drink, others a walk outside to clear their head before work.",
    "Think about the smell that fills a kitchen early in the day, dark and a little bitter.",
    "That sounds like something brewed slowly, maybe in a small pot on the stove.",
    "Many cities have shops devoted entirely to it, with long queues before nine.",
    "I think I know where this is going, but let me hear one more clue before I guess.",
]


def synthetic_rows(n: int, seed: int = 0, min_chars: int = 0) -> list[dict]:
    """``n`` game rows of a few hundred tokens; ``min_chars``: each completion at least that long (lines
    repeated), for rows that fill a long ``max_length`` once cut from the left."""
    from spag.game.taboo.prompts import training_prompt

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        word = rng.choice(_WORDS)
        turns = rng.randrange(0, 6)
        history = [
            {"role": "attacker" if t % 2 == 0 else "defender", "content": rng.choice(_LINES)}
            for t in range(turns)
        ]
        role = "attacker" if turns % 2 == 0 else "defender"
        completion = " ".join(rng.choice(_LINES) for _ in range(rng.randrange(1, 3)))
        while len(completion) < min_chars:
            completion += " " + rng.choice(_LINES)
        rows.append(
            {
                "prompt": training_prompt(role, word, history, 5, rng),
                "completion": completion,
                "reward": rng.choice([0.2, 0.4, -0.3]),
                "weight": 1.0,
                "role": role,
                "kind": "game",
                "target_word": word,
                "turn": turns,
                "episode": f"e{i}",
            }
        )
    return rows


def _series(live_dir: Path, name: str) -> list[float]:
    lines = (live_dir / "plots" / "metrics" / "train" / f"{name}.tsv").read_text().splitlines()[1:]
    return [float(line.split("\t")[1]) for line in lines]


def child(args) -> None:
    import statistics

    import torch

    from spag.harness.training import train
    from spag.train.bookkeeping import read_summary

    on_the_fly = args.child == "on-the-fly"
    if args.child == "padded":  # the trainer as it runs on a GPU: one padded forward per step
        from spag.train import trainer as spag_trainer

        grouped_init = spag_trainer.SpagTrainer.__init__

        def padded_init(self, *a, **k):
            grouped_init(self, *a, **k)
            self._unpadded = False

        spag_trainer.SpagTrainer.__init__ = padded_init
    out = Path(args.work) / f"out-{args.child}"
    live_dir = Path(args.work) / f"live-{args.child}"
    train(
        "offline-po",
        args.model,
        args.data,
        out,
        learning_rate=1e-5,
        max_steps=args.steps,
        batch_size=args.batch_size,
        grad_accum=1,
        max_length=args.max_length,
        ref_on_the_fly=on_the_fly,
        ref_cache_dir=str(Path(args.work) / "ref-cache"),
        ref_batch_size=args.batch_size,
        live_dir=live_dir,
        logging_steps=1,
        save_steps=10**9,
        warmup_ratio=0.0,
        show_progress=False,
        seed=0,
    )
    summary = read_summary(out)
    # Per-step throughput from the logged curves (cumulative runtime and tokens at every step); the
    # median over steps 2.. is robust to the first step's warm-up and to other work on a shared machine.
    runtime, tokens = _series(live_dir, "runtime"), _series(live_dir, "num_input_tokens_seen")
    per_step = [
        (t1 - t0) / (r1 - r0) for r0, r1, t0, t1 in zip(runtime, runtime[1:], tokens, tokens[1:]) if r1 > r0
    ]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_rss_mib = usage.ru_maxrss / 1024  # KiB on Linux
    peak_cuda_mib = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    print(
        "BENCH "
        + json.dumps(
            {
                "setting": args.child,
                "tokens": summary["tokens"],
                "train_seconds": summary["train_seconds"],
                "median_step_tokens_per_s": statistics.median(per_step) if per_step else None,
                "ref_seconds": summary["reference"].get("seconds", 0.0),
                "reused": summary["reference"].get("reused"),
                "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
                "peak_rss_mib": round(peak_rss_mib, 1),
                "peak_cuda_mib": round(peak_cuda_mib, 1) if peak_cuda_mib is not None else None,
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each warm / on-the-fly setting")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    with tempfile.TemporaryDirectory(prefix="spag-bench-train-") as work:
        note = ""
        if args.model is None:
            if (DEFAULT_MODEL / "config.json").exists():
                args.model = str(DEFAULT_MODEL)
            else:
                from spag.testing import make_tiny_checkpoint

                args.model = str(make_tiny_checkpoint(Path(work) / "tiny", hidden_size=128, layers=4))
                note = (
                    "note: data/base/model not found (run `spag base-model` or `dvc repro base_model`); "
                    "measured on a tiny random Llama instead"
                )
        from spag.runtime.atomic import write_jsonl_atomic

        data = Path(work) / "rows.jsonl"
        write_jsonl_atomic(data, synthetic_rows(args.rows))
        results = []
        # Cold once (it fills the cache), then warm and on-the-fly alternately, so that a burst of
        # other work on the machine hits both alike.
        for setting in ("precomputed-cold",) + ("precomputed-warm", "padded", "on-the-fly") * args.repeats:
            command = [
                sys.executable,
                __file__,
                "--child",
                setting,
                "--work",
                work,
                "--data",
                str(data),
                "--model",
                args.model,
                "--steps",
                str(args.steps),
                "--batch-size",
                str(args.batch_size),
                "--max-length",
                str(args.max_length),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
            if done.returncode != 0 or not lines:
                sys.stderr.write(done.stderr[-4000:])
                raise SystemExit(f"{setting}: the child failed (exit {done.returncode})")
            results.append(json.loads(lines[-1][len("BENCH ") :]))
            print(f"  {results[-1]}", file=sys.stderr, flush=True)

    import torch

    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"CPU ({torch.get_num_threads()} threads)"
    )
    print(
        f"model {args.model}; {args.rows} rows, {args.steps} steps of batch {args.batch_size}, "
        f"max length {args.max_length}, offline-po; {device}"
    )
    if note:
        print(note)
    on_gpu = results[0]["peak_cuda_mib"] is not None
    memory_key = "peak_cuda_mib" if on_gpu else "peak_rss_mib"
    print(
        f"{'setting':<18} {'runs':>4} {'step tok/s (median)':>19} {'train tok/s':>11} {'ref pass s':>10} "
        f"{'CPU s':>7} {'peak ' + ('CUDA' if on_gpu else 'RSS') + ' MiB':>13}"
    )
    best: dict[str, dict] = {}
    for setting in SETTINGS:
        runs = [r for r in results if r["setting"] == setting]
        step_tps = max(r["median_step_tokens_per_s"] or 0.0 for r in runs)
        train_tps = max(r["tokens"] / r["train_seconds"] for r in runs)
        memory = max(r[memory_key] for r in runs)
        cpu = min(r["cpu_seconds"] for r in runs)
        best[setting] = {"step_tps": step_tps, "memory": memory, "cpu": cpu}
        print(
            f"{setting:<18} {len(runs):>4} {step_tps:>19.1f} {train_tps:>11.1f} "
            f"{max(r['ref_seconds'] for r in runs):>10.2f} {cpu:>7.1f} {memory:>13.1f}"
        )
    cold = next(r for r in results if r["setting"] == "precomputed-cold")
    warm, fly = best["precomputed-warm"], best["on-the-fly"]
    print(
        f"reference pass (cold cache): {cold['ref_seconds']:.1f}s for {args.rows} rows; "
        f"warm cache: {max(r['ref_seconds'] for r in results if r['setting'] == 'precomputed-warm'):.2f}s"
    )
    padded = best["padded"]
    print(
        f"rows grouped by length vs one padded batch per step: {warm['step_tps'] / padded['step_tps']:.2f}x "
        f"the training tokens/s, {warm['cpu'] / padded['cpu']:.2f}x the CPU seconds of the whole run"
    )
    print(
        f"precomputed vs on the fly: {warm['step_tps'] / fly['step_tps']:.2f}x the training tokens/s, "
        f"{warm['memory'] / fly['memory']:.2f}x the peak memory, {warm['cpu'] / fly['cpu']:.2f}x the CPU "
        f"seconds of the whole run (best of {args.repeats} runs each)"
    )


if __name__ == "__main__":
    main()
