"""The Kuhn poker exploitability experiment: every run a pre-registration names, then its summary.

    python scripts/kuhn_experiment.py run [--design experiments/kuhn-exploitability.yaml] [--out runs/kuhn]
                                          [--only START-ARM-SEED,...] [--keep-models]
    python scripts/kuhn_experiment.py summarise [--design ...] [--out runs/kuhn] [-o results.json]

``run`` trains each starting point once (the teacher's hands and imitation, in ``OUT/starts/START``), then
plays every run the design names, seed by seed (all starting points and arms of seed 0, then of seed 1, ...),
each in its own folder ``OUT/runs/START-ARM-SEED`` laid out as the pipeline's (``data/``, ``metrics/``): the
pipeline's own stage functions run there in this process (play, reward, train; online: train), as ``dvc
repro`` runs them, with the design's settings written to that folder's ``params.yaml``. After each checkpoint
the strategy is read (:mod:`spag.evaluate.strategy`: exact, and played where the exact way's mass is below the
design's threshold) into ``metrics/epochs/N/`` (``start/`` for the start). A run that stops resumes at its
next unfinished step; a finished run is skipped. Checkpoints of the epochs are deleted once read (``--keep-
models`` keeps them): each is 0.5 GB at 135M.

``summarise`` reads every finished run and writes, per starting point and arm, the curve (mean exploitability
per checkpoint with a 95% t interval over seeds) and the registered test: last epoch minus start, paired by
seed, with its t interval; ``-o`` writes it as JSON, and a Markdown table goes to stdout.

The design file is the pre-registration: its keys are read here and nowhere else. ``SPAG_KUHN_MODEL`` (a model
folder) replaces the base model: the tests run the whole script on a tiny random model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spag.config import apply_overrides, load_settings, to_yaml, validate
from spag.evaluate.strategy import FIGURES, exact_rows, exploitability_report, played_rows, profile_of
from spag.evaluate.strategy import write_strategy as write_rows_and_report
from spag.game.kuhn.exploitability import all_figures, equilibrium
from spag.pipeline.evaluation import evaluation_config
from spag.pipeline.run import Layout, run_stage
from spag.pipeline.stages.base_model import base_model
from spag.pipeline.stages.imitate import imitate
from spag.pipeline.stages.imitation_data import imitation_data
from spag.pipeline.stages.play import play
from spag.pipeline.stages.reward import reward
from spag.pipeline.stages.teacher_play import teacher_play
from spag.pipeline.stages.train import train
from spag.pipeline.stages.words import words
from spag.players import close_player, load_player
from spag.runtime.outputs import write_json_atomic, write_text_atomic

MODEL_VARIABLE = "SPAG_KUHN_MODEL"


# ------------------------------------------------------------------------------------------ the design


def read_design(path: Path) -> dict:
    design = yaml.safe_load(path.read_text())
    for key in ("preset", "overrides", "epochs", "starts", "arms", "seeds", "strategy"):
        if key not in design:
            raise SystemExit(f"error: {path}: {key}: missing from the design")
    return design


def run_names(design: dict) -> list[str]:
    """Every run, seed by seed: ``START-ARM-SEED``."""
    return [f"{start}-{arm}-{seed}" for seed in design["seeds"] for start in design["starts"] for arm in design["arms"]]


def params_for(design: dict, start: str, arm: str | None, seed: int) -> str:
    """The params.yaml of one run (``arm`` None: the starting point's own folder), validated."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    preset = yaml.safe_load((ROOT / design["preset"]).read_text())
    params = apply_overrides(params, preset, design["preset"])
    params = apply_overrides(params, design["overrides"], "the design's overrides")
    params = apply_overrides(params, design["starts"][start] or {}, f"starts.{start}")
    first = "base" if start == "base" else "imitation"
    chain = {str(n): {"previous": first if n == 1 else f"epoch_{n - 1}"} for n in range(1, design["epochs"] + 1)}
    params = apply_overrides(params, {"seed": seed, "spag.epochs": chain}, "the run")
    if arm is not None:
        params = apply_overrides(params, design["arms"][arm], f"arms.{arm}")
    if os.environ.get(MODEL_VARIABLE):
        params = apply_overrides(params, {"model.base": os.environ[MODEL_VARIABLE]}, MODEL_VARIABLE)
    return to_yaml(validate(params, "the design"), comments=False)


# ------------------------------------------------------------------------------------------ the strategy


def read_strategy(model: Path, params: Path, seed: int, design: dict, played: bool | None = None) -> dict:
    """A checkpoint's rows and figures: exact, and played where ``played`` (None: where the exact way's
    smallest mass is below the design's threshold)."""
    settings = load_settings(params)
    config = replace(evaluation_config(settings), seed=seed)  # the evaluation's sampling, the run's seed
    player = load_player(str(model), "hf", **settings.evaluate.player_options("hf"))
    try:
        rows = exact_rows(player, config)
        if played is None:
            played = min(r["mass"] for r in rows) < design["strategy"]["mass_threshold"]
        if played:
            rows += played_rows(player, config, design["strategy"]["samples"])
    finally:
        close_player(player)
    ways = ("exact", "played") if played else ("exact",)
    return {"rows": rows, "figures": exploitability_report(rows, {w: all_figures(profile_of(rows, w)) for w in ways})}


def write_strategy(folder: Path, measured: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_rows_and_report(folder, measured["rows"], measured["figures"], replace="any")


# ------------------------------------------------------------------------------------------ running


def _stage(function, root: Path, epoch: str | None = None) -> None:
    cwd = os.getcwd()
    os.chdir(root)  # a stage reads "params.yaml" relative to where it runs, as under DVC
    try:
        run_stage(function, root, [epoch] if epoch is not None else [])
    finally:
        os.chdir(cwd)


def _done(root: Path, step: str) -> bool:
    return step in _progress(root)


def _progress(root: Path) -> dict:
    path = root / "progress.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _mark(root: Path, step: str, **extra) -> None:
    progress = _progress(root)
    progress[step] = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra}
    write_json_atomic(root / "progress.json", progress, replace="any")


def prepare_start(design: dict, out: Path, start: str) -> Path:
    """The starting point's folder: the base model, the deals and (but for ``base``) the imitation model."""
    root = out / "starts" / start
    root.mkdir(parents=True, exist_ok=True)
    write_text_atomic(root / "params.yaml", params_for(design, start, None, 0), replace="any")
    shared = Layout(out / "starts" / "base").model("base").parent  # data/base, the base model's folder
    steps = [("base_model", base_model), ("words", words)]
    if start != "base":
        steps += [("teacher_play", teacher_play), ("imitation_data", imitation_data), ("imitate", imitate)]
    for name, function in steps:
        if _done(root, name):
            continue
        began = time.perf_counter()
        if name == "base_model" and start != "base":
            _link(Layout(root).model("base").parent, shared)
        else:
            _stage(function, root)
        _mark(root, name, seconds=round(time.perf_counter() - began, 1))
    return root


def start_checkpoint(start_root: Path, start: str) -> Path:
    return Layout(start_root).model("base" if start == "base" else "imitation")


def _link(path: Path, target: Path) -> None:
    """``path`` a link to the folder ``target`` (a run shares its start's models and deals)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.symlink_to(target.resolve())


def run_one(design: dict, out: Path, name: str, keep_models: bool) -> None:
    start, arm, seed = name.rsplit("-", 2)
    seed = int(seed)
    prepare_start(design, out, "base")  # the base model every start links to
    start_root = prepare_start(design, out, start)
    root = out / "runs" / name
    if _done(root, "finished"):
        return
    began = time.perf_counter()
    (root / "data").mkdir(parents=True, exist_ok=True)
    write_text_atomic(root / "params.yaml", params_for(design, start, arm, seed), replace="any")
    layout, start_layout = Layout(root), Layout(start_root)
    shared = ["base"] + ([] if start == "base" else ["imitation"])
    for kept in shared:  # data/base, data/imitation: each checkpoint's folder
        _link(layout.model(kept).parent, start_layout.model(kept).parent)
    _link(layout.words, start_layout.words)
    params = root / "params.yaml"
    if not _done(root, "start"):
        figures_path = start_root / "metrics" / "start" / FIGURES
        if not figures_path.exists():  # the exact way is the same for every seed: read once per start
            write_strategy(figures_path.parent, read_strategy(start_checkpoint(start_root, start), params, 0, design,
                                                              played=False))
        exact = json.loads(figures_path.read_text())["exact"]
        played = exact["mass_min"] < design["strategy"]["mass_threshold"]
        measured = read_strategy(start_checkpoint(start_root, start), params, seed, design, played=played)
        write_strategy(layout.metrics / "start", measured)
        _mark(root, "start")
    for n in range(1, design["epochs"] + 1):
        epoch = str(n)
        if _done(root, f"epoch_{epoch}"):
            continue
        t0 = time.perf_counter()
        if arm == "offline":
            _stage(play, root, epoch)
            _stage(reward, root, epoch)
        _stage(train, root, epoch)
        write_strategy(layout.metrics / "epochs" / epoch, read_strategy(layout.model(f"epoch_{epoch}"), params, seed,
                                                                         design))
        if not keep_models and n > 1:
            shutil.rmtree(layout.model(f"epoch_{n - 1}"), ignore_errors=True)
        _mark(root, f"epoch_{epoch}", seconds=round(time.perf_counter() - t0, 1))
    last = design["epochs"]
    _comparable(design, root, params, seed, last, start_root, start)
    if not keep_models:
        shutil.rmtree(layout.model(f"epoch_{last}"), ignore_errors=True)
    _mark(root, "finished", seconds=round(time.perf_counter() - began, 1))
    print(f"[kuhn_experiment] {name}: finished in {time.perf_counter() - began:.0f} s", flush=True)


def _comparable(design: dict, root: Path, params: Path, seed: int, last: int, start_root: Path, start: str) -> None:
    """Where one of the start and the last epoch has only the exact way, the other played, read the played way
    of the one that lacks it, so that the two are compared on the same way (the design's rule)."""
    layout = Layout(root)
    folders = {"start": layout.metrics / "start", "last": layout.metrics / "epochs" / str(last)}
    have = {key: "played" in json.loads((folder / FIGURES).read_text()) for key, folder in folders.items()}
    if have["start"] == have["last"]:
        return
    key = "start" if not have["start"] else "last"
    model = start_checkpoint(start_root, start) if key == "start" else layout.model(f"epoch_{last}")
    write_strategy(folders[key], read_strategy(model, params, seed, design, played=True))


def run(design: dict, out: Path, only: list[str] | None, keep_models: bool) -> None:
    names = run_names(design)
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise SystemExit(f"error: --only: {', '.join(unknown)}: not a run of the design")
        names = [n for n in names if n in only]
    began = time.perf_counter()
    for k, name in enumerate(names, 1):
        print(f"[kuhn_experiment] run {k}/{len(names)}: {name}", flush=True)
        run_one(design, out, name, keep_models)
    print(f"[kuhn_experiment] {len(names)} runs in {time.perf_counter() - began:.0f} s -> {out}", flush=True)


# ------------------------------------------------------------------------------------------ summary


def t_interval(values: list[float]) -> dict:
    """Mean and its 95% t interval (n - 1 degrees of freedom); no interval for a single value."""
    from scipy.stats import t

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n}
    half = float(t.ppf(0.975, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def _probabilities(folder: Path, way: str) -> dict[str, float]:
    """``{"card history": probability of the aggressive action}`` of one way's rows."""
    rows = [json.loads(line) for line in (folder / "strategy.jsonl").read_text().splitlines()]
    return {f"{r['player']} {r['card']} {r['history'] or 'opening'}": r["probability"] for r in rows if r["way"] == way}


def _figures(folder: Path) -> dict:
    return json.loads((folder / FIGURES).read_text())


def summarise(design: dict, out: Path) -> dict:
    """Per starting point and arm: the curve and the registered test over the finished runs."""
    last = design["epochs"]
    cells = {}
    for start in design["starts"]:
        for arm in design["arms"]:
            runs = []
            for seed in design["seeds"]:
                root = out / "runs" / f"{start}-{arm}-{seed}"
                if not _done(root, "finished"):
                    continue
                metrics = Layout(root).metrics
                points = {"start": _figures(metrics / "start"),
                          **{f"epoch_{n}": _figures(metrics / "epochs" / str(n)) for n in range(1, last + 1)}}
                both_exact = all(points[k]["exact"]["mass_min"] >= design["strategy"]["mass_threshold"]
                                 for k in ("start", f"epoch_{last}"))
                way = "exact" if both_exact else "played"
                selfplay = [json.loads(p.read_text()) for n in range(1, last + 1)
                            if (p := metrics / "epochs" / str(n) / "selfplay.json").exists()]
                before, after = (_probabilities(folder, way) for folder in (metrics / "start",
                                                                            metrics / "epochs" / str(last)))
                runs.append({"seed": seed, "way": way, "seconds": _progress(root)["finished"]["seconds"],
                             "points": points, "selfplay_foul_rate": [s.get("foul_rate") for s in selfplay],
                             "difference": points[f"epoch_{last}"][way]["chips"]["exploitability"]
                             - points["start"][way]["chips"]["exploitability"],
                             "probabilities": {"start": before, "last": after},
                             "moved": statistics.fmean(abs(after[k] - before[k]) for k in before)})
            if not runs:
                continue
            curve = {}
            for key in runs[0]["points"]:
                for way in ("exact", "played"):
                    values = [r["points"][key][way]["chips"]["exploitability"] for r in runs if way in r["points"][key]]
                    if values:
                        curve.setdefault(key, {})[way] = t_interval(values)
                curve[key]["mass_min"] = statistics.fmean(r["points"][key]["exact"]["mass_min"] for r in runs)
            test = t_interval([r["difference"] for r in runs])
            test["passed"] = test["high"] is not None and test["high"] < 0
            secondary = {}
            for key in ("start", f"epoch_{last}"):
                figures = [r["points"][key][r["way"]] for r in runs]
                secondary[key] = {
                    "wins_exploitability": statistics.fmean(f["wins"]["exploitability"] for f in figures),
                    "vs_equilibrium_first": statistics.fmean(f["chips"]["vs_equilibrium_first"] for f in figures),
                    "vs_equilibrium_second": statistics.fmean(f["chips"]["vs_equilibrium_second"] for f in figures),
                    "broken_share": statistics.fmean(r["points"][key]["played"]["broken_share"] for r in runs)
                    if all("played" in r["points"][key] for r in runs) else None}
            secondary["moved"] = t_interval([r["moved"] for r in runs])  # exploratory: not registered
            secondary["probabilities"] = {
                which: {k: statistics.fmean(r["probabilities"][which][k] for r in runs)
                        for k in runs[0]["probabilities"][which]} for which in ("start", "last")}
            cells[f"{start}/{arm}"] = {"runs": runs, "curve": curve, "test": test, "secondary": secondary,
                                       "ways": sorted({r["way"] for r in runs}),
                                       "seconds_mean": statistics.fmean(r["seconds"] for r in runs)}
    reference = all_figures(equilibrium())
    return {"design": design, "equilibrium": reference, "cells": cells}


def markdown(result: dict) -> str:
    lines = ["| start / arm | runs | way | start | epoch 1 | last epoch | last − start [95% t] | passed | s/run |",
             "|---|---:|---|---|---|---|---|---|---:|"]

    def show(entry: dict | None) -> str:
        if not entry:
            return "–"
        if entry["low"] is None:
            return f"{entry['mean']:.3f}"
        return f"{entry['mean']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"

    last = f"epoch_{result['design']['epochs']}"
    for name, cell in result["cells"].items():
        # the curve on the exact way wherever a run compares on it (every checkpoint has it), else the played
        way = "exact" if "exact" in cell["ways"] else "played"
        played = sum(r["way"] == "played" for r in cell["runs"])
        ways = way if played in (0, len(cell["runs"])) else f"exact ({played} run{'s' * (played > 1)} played)"
        curve = cell["curve"]
        lines.append(f"| {name} | {len(cell['runs'])} | {ways} | {show(curve['start'].get(way))} | "
                     f"{show(curve['epoch_1'].get(way))} | {show(curve[last].get(way))} | {show(cell['test'])} | "
                     f"{'yes' if cell['test']['passed'] else 'no'} | {cell['seconds_mean']:.0f} |")
    lines += ["", "| start / arm | win/loss exploitability, start → last | vs equilibrium as first / second, start → "
                  "last | rule-breaking replies (played), start → last | mean abs. change of the 12 probabilities |",
              "|---|---|---|---|---|"]

    def pair(a, b, digits=3):
        return "–" if a is None or b is None else f"{a:.{digits}f} → {b:.{digits}f}"

    for name, cell in result["cells"].items():
        before, after = cell["secondary"]["start"], cell["secondary"][last]
        lines.append(f"| {name} | {pair(before['wins_exploitability'], after['wins_exploitability'])} | "
                     f"{pair(before['vs_equilibrium_first'], after['vs_equilibrium_first'])} / "
                     f"{pair(before['vs_equilibrium_second'], after['vs_equilibrium_second'])} | "
                     f"{pair(before['broken_share'], after['broken_share'], 2)} | {show(cell['secondary']['moved'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("run", "summarise"))
    parser.add_argument("--design", type=Path, default=ROOT / "experiments" / "kuhn-exploitability.yaml")
    parser.add_argument("--out", type=Path, default=Path("runs/kuhn"))
    parser.add_argument("--only", help="comma-separated runs START-ARM-SEED")
    parser.add_argument("--keep-models", action="store_true")
    parser.add_argument("-o", "--output", type=Path, help="summarise: the JSON")
    args = parser.parse_args(argv)
    design = read_design(args.design)
    out = args.out.resolve()
    if args.command == "run":
        run(design, out, args.only.split(",") if args.only else None, args.keep_models)
        return 0
    result = summarise(design, out)
    if args.output:
        write_json_atomic(args.output, result, replace="any")
    print(markdown(result))
    finished = sum(len(c["runs"]) for c in result["cells"].values())
    print(f"[kuhn_experiment] summary of {finished} of {len(run_names(design))} runs"
          + (f" -> {args.output}" if args.output else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
