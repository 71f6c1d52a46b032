"""A checkpoint's reasoning benchmark as the stages run it: lm-eval's tasks on the offline items, or a note
that the settings passed it over."""

from __future__ import annotations

from pathlib import Path

from spag.evaluate.benchmark import run_benchmark
from spag.evaluate.reasoning import measured, passed_over, why_not_run
from spag.pipeline.context import Declared, Layout
from spag.runtime.atomic import write_json_atomic, write_text_atomic
from spag.runtime.errors import BenchmarkError, ParamsError


def benchmark_model(settings: Declared, layout: Layout, model: Path, metrics_dir: Path) -> dict:
    """The model's benchmark scores, its per-item results beside them (``benchmark.samples.jsonl``). The
    lm-eval seeds stay fixed (not the run's ``seed``): every run and training seed answers the same
    prompts, so all checkpoints of all runs pair up."""
    bench = settings.evaluate.benchmark
    try:
        return run_benchmark(
            str(model),
            tasks=bench.tasks,
            suite=bench.suite,
            limit=bench.limit,
            output=metrics_dir / "benchmark.json",
            data=None if bench.suite == "local" else layout.benchmark_data,
        )
    except BenchmarkError as exc:
        raise ParamsError("params.yaml", "evaluate.benchmark", str(exc)) from None


def benchmark_passed_over(folder: Path, **why) -> dict:
    """The outputs of a benchmark the settings pass over: no samples, and a benchmark.json saying why."""
    write_text_atomic(folder / "benchmark.samples.jsonl", "")
    skipped = passed_over(**why)
    write_json_atomic(folder / "benchmark.json", skipped)
    return skipped


def reasoning_line(scores: dict) -> str:
    if not measured(scores):
        return f"benchmark not run ({why_not_run(scores)})"
    tasks = ", ".join(
        f"{name} {r['score']:.3f}" + (" (at chance)" if r.get("at_chance") else "")
        for name, r in scores["tasks"].items()
    )
    skipped = f"; skipped: {', '.join(scores['skipped'])}" if scores.get("skipped") else ""
    return f"benchmark {tasks}{skipped}"
