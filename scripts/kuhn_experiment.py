"""A pre-registered Kuhn poker experiment: every run its design names, then its summary.

    python scripts/kuhn_experiment.py run [--design experiments/kuhn-positive-control.yaml] [--out runs/kuhn]
                                          [--only START-ARM-SEED,...] [--keep-models]
    python scripts/kuhn_experiment.py summarise [--design ...] [--out runs/kuhn] [-o results.json [--overwrite]]
                                                [--merge earlier-results.json]
    python scripts/kuhn_experiment.py starts [--design ...] [--out runs/kuhn] [-o starts.json [--overwrite]]

``run`` trains each starting point once (the teacher's hands and imitation, in ``OUT/starts/START``), then
plays every run the design names, seed by seed (all starting points and arms of seed 0, then of seed 1, ...;
the arms of ``last_arms`` after all the others), each in its own folder ``OUT/runs/START-ARM-SEED`` laid out
as the pipeline's (``data/``, ``metrics/``): the pipeline's own stage functions run there in this process
(play, reward, train; online: train), as ``dvc repro`` runs them, with the design's settings written to that
folder's ``params.yaml``. After each checkpoint the strategy is read (:mod:`spag.evaluate.strategy`: exact,
and played where the exact way's mass is below the design's threshold) into ``metrics/epochs/N/``
(``start/`` for the start). A run that stops resumes at its next unfinished step; a finished run is skipped.
Checkpoints of the epochs are deleted once read and the next epoch has been marked done (``--keep-models``
keeps them): each is 0.5 GB at 135M. ``OUT/design.json`` keeps the design the runs were made under, and a
run or a summary under another design is refused.

``summarise`` reads every finished run and writes, per starting point and arm: every run's 12 probabilities
and figures at every checkpoint, the curve (mean exploitability per checkpoint with a 95% t interval over
seeds), the criteria of the design (``criteria``: the change paired by seed, the rise of K's calling over
J's, the runs below the never-fold floor) and, where the design names a ``twin``, the tabular twin of every
arm on the runs' own settings and seeds (:mod:`spag.train.twin`) with the same criteria, beside CFR
(:mod:`spag.game.kuhn.cfr`). ``-o`` writes it as JSON (a file already there only with ``--overwrite``, and only
one this script wrote); a Markdown table goes to stdout. ``--merge`` takes the runs of an earlier summary of the
same design for every run not finished in ``OUT`` (a run's folder lost, its figures kept), so that seeds run
in different sittings are summarised together; the twin is recomputed.

``starts`` trains every starting point of the design (as ``run`` does, nothing more) and prints each one's 12
exact probabilities as a table, with its exploitability; ``-o`` writes them as JSON.

The design file is the pre-registration: its keys are read here and nowhere else. ``SPAG_KUHN_MODEL`` (a model
folder) replaces the base model: the tests run the whole script on a tiny random model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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
from spag.evaluate.strategy import (
    FIGURES,
    exact_rows,
    exploitability_report,
    played_rows,
    profile_of,
    strategy_table,
)
from spag.evaluate.strategy import write_strategy as write_rows_and_report
from spag.game.kuhn.cfr import cfr_curve
from spag.game.kuhn.exploitability import all_figures, constant, equilibrium
from spag.harness.rule import claim_file, replace_mode
from spag.pipeline.context import Layout
from spag.pipeline.evaluation import evaluation_config
from spag.pipeline.run import run_stage
from spag.pipeline.stages.base_model import base_model
from spag.pipeline.stages.imitate import imitate
from spag.pipeline.stages.imitation_data import imitation_data
from spag.pipeline.stages.play import play
from spag.pipeline.stages.reward import reward
from spag.pipeline.stages.teacher_play import teacher_play
from spag.pipeline.stages.train import train
from spag.pipeline.stages.words import words
from spag.players import close_player, load_player
from spag.runtime.atomic import write_json_atomic, write_text_atomic
from spag.runtime.errors import OutputRefused, ParamsError
from spag.runtime.statistics import t_interval

MODEL_VARIABLE = "SPAG_KUHN_MODEL"
BASE = "base"  # the starting point without imitation, and the folder of the base model every start shares
REQUIRED = {
    "preset": str,
    "overrides": dict,
    "epochs": int,
    "starts": dict,
    "arms": dict,
    "seeds": list,
    "strategy": dict,
}
OPTIONAL = {"model_dtype": str, "last_arms": list, "twin": dict, "criteria": dict, "success": str}
CRITERIA = ("improvement", "call_gap_rise", "floor", "below_floor_seeds")
CFR_MARKS = (100, 1000)  # CFR's exploitability is also reported after these many iterations


class DesignError(Exception):
    """A design that cannot be run as written: one line naming the key."""


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


# ------------------------------------------------------------------------------------------ the design


def read_design(path: Path) -> dict:
    """The design file, its keys and their types checked (DesignError naming the first that is wrong)."""
    try:
        design = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DesignError(f"{path}: cannot be read as YAML ({type(exc).__name__})") from None
    if not isinstance(design, dict):
        raise DesignError(f"{path}: expected a mapping of the design's keys, got {type(design).__name__}")
    for key, kind in REQUIRED.items():
        if key not in design:
            raise DesignError(f"{path}: {key}: missing from the design")
    for key, value in design.items():
        kind = {**REQUIRED, **OPTIONAL}.get(key)
        if kind is None:
            raise DesignError(f"{path}: {key}: not a key of a design ({', '.join([*REQUIRED, *OPTIONAL])})")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise DesignError(f"{path}: {key}: expected {kind.__name__}, got {value!r}")
    if not design["seeds"] or not all(type(s) is int and s >= 0 for s in design["seeds"]):
        raise DesignError(f"{path}: seeds: expected a list of seeds (integers >= 0), got {design['seeds']!r}")
    if len(set(design["seeds"])) != len(design["seeds"]):
        raise DesignError(f"{path}: seeds: a seed is listed twice")
    for group in ("starts", "arms"):
        for name, overrides in design[group].items():
            if "-" in str(name) or not isinstance(overrides, dict | None):
                raise DesignError(
                    f"{path}: {group}.{name}: expected a name without '-' and a mapping of settings"
                )
    unknown = [a for a in design.get("last_arms", []) if a not in design["arms"]]
    if unknown:
        raise DesignError(f"{path}: last_arms: {unknown[0]!r} is not an arm of the design")
    missing = [k for k in CRITERIA if k not in design.get("criteria", dict.fromkeys(CRITERIA))]
    if missing:
        raise DesignError(f"{path}: criteria.{missing[0]}: missing from the design")
    for start in design["starts"]:
        for arm in design["arms"]:
            try:  # every run's settings validate before any is played (a typo in an override, say)
                params_for(design, start, arm, design["seeds"][0])
            except ParamsError as exc:
                raise DesignError(f"{path}: {start}-{arm}: {exc}") from None
    return design


def run_names(design: dict) -> list[str]:
    """Every run, seed by seed: ``START-ARM-SEED``; the arms of ``last_arms`` after all the others."""
    last = design.get("last_arms", [])
    order = [a for a in design["arms"] if a not in last] + list(last)
    names = []
    for group in ([a for a in order if a not in last], last):
        names += [
            f"{start}-{arm}-{seed}" for seed in design["seeds"] for start in design["starts"] for arm in group
        ]
    return names


def params_for(design: dict, start: str, arm: str | None, seed: int) -> str:
    """The params.yaml of one run (``arm`` None: the starting point's own folder), validated."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    preset = yaml.safe_load((ROOT / design["preset"]).read_text())
    params = apply_overrides(params, preset, design["preset"])
    params = apply_overrides(params, design["overrides"], "the design's overrides")
    params = apply_overrides(params, design["starts"].get(start) or {}, f"starts.{start}")
    first = BASE if start == BASE else "imitation"
    chain = {
        str(n): {"previous": first if n == 1 else f"epoch_{n - 1}"} for n in range(1, design["epochs"] + 1)
    }
    params = apply_overrides(params, {"seed": seed, "spag.epochs": chain}, "the run")
    if arm is not None:
        params = apply_overrides(params, design["arms"][arm] or {}, f"arms.{arm}")
    if os.environ.get(MODEL_VARIABLE):
        params = apply_overrides(params, {"model.base": os.environ[MODEL_VARIABLE]}, MODEL_VARIABLE)
    return to_yaml(validate(params, "the design"), comments=False)


def hold_design(design: dict, out: Path) -> None:
    """``OUT/design.json`` is the design the runs in ``out`` are made under: written by the first run, and any
    other design is refused there (its runs would be summarised as if they were this design's)."""
    path = out / "design.json"
    if path.exists():
        if json.loads(path.read_text(encoding="utf-8")) != design:
            raise DesignError(
                f"{out}: its runs were made under another design ({path}); give that design or another --out"
            )
        return
    write_json_atomic(path, design)


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
    return {
        "rows": rows,
        "figures": exploitability_report(rows, {w: all_figures(profile_of(rows, w)) for w in ways}),
    }


def write_strategy(folder: Path, measured: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_rows_and_report(folder, measured["rows"], measured["figures"])


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
    write_json_atomic(root / "progress.json", progress)


def prepare_start(design: dict, out: Path, start: str) -> Path:
    """The starting point's folder: the base model, the deals and (but for ``base``) the imitation model."""
    root = out / "starts" / start
    root.mkdir(parents=True, exist_ok=True)
    write_text_atomic(root / "params.yaml", params_for(design, start, None, 0))
    shared = Layout(out / "starts" / BASE).model(BASE).parent  # data/base, the base model's folder
    steps = [("base_model", base_model), ("words", words)]
    if start != BASE:
        steps += [("teacher_play", teacher_play), ("imitation_data", imitation_data), ("imitate", imitate)]
    for name, function in steps:
        if _done(root, name):
            continue
        began = time.perf_counter()
        if name == "base_model" and start != BASE:
            _link(Layout(root).model(BASE).parent, shared)
        else:
            _stage(function, root)
        _mark(root, name, seconds=round(time.perf_counter() - began, 1))
    return root


def start_checkpoint(start_root: Path, start: str) -> Path:
    return Layout(start_root).model(BASE if start == BASE else "imitation")


def _link(path: Path, target: Path) -> None:
    """``path`` a relative link to the folder ``target`` (a run shares its start's models and deals), so that
    the whole output folder can be moved."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        if path.is_symlink():  # a link that points nowhere: an absolute one from before a move
            path.unlink()
        path.symlink_to(os.path.relpath(target.resolve(), path.parent.resolve()))


def run_one(design: dict, out: Path, name: str, keep_models: bool) -> None:
    start, arm, seed = name.rsplit("-", 2)
    seed = int(seed)
    prepare_start(design, out, BASE)  # the base model every start links to
    start_root = prepare_start(design, out, start)
    root = out / "runs" / name
    if _done(root, "finished"):
        return
    began = time.perf_counter()
    (root / "data").mkdir(parents=True, exist_ok=True)
    write_text_atomic(root / "params.yaml", params_for(design, start, arm, seed))
    layout, start_layout = Layout(root), Layout(start_root)
    shared = [BASE] + ([] if start == BASE else ["imitation"])
    for kept in shared:  # data/base, data/imitation: each checkpoint's folder
        _link(layout.model(kept).parent, start_layout.model(kept).parent)
    _link(layout.words, start_layout.words)
    params = root / "params.yaml"
    if not _done(root, "start"):
        figures_path = start_root / "metrics" / "start" / FIGURES
        if not figures_path.exists():  # the exact way is the same for every seed: read once per start
            write_strategy(
                figures_path.parent,
                read_strategy(start_checkpoint(start_root, start), params, 0, design, played=False),
            )
        exact = json.loads(figures_path.read_text())["exact"]
        played = exact["mass_min"] < design["strategy"]["mass_threshold"]
        measured = read_strategy(start_checkpoint(start_root, start), params, seed, design, played=played)
        write_strategy(layout.metrics / "start", measured)
        _mark(root, "start")
    online = load_settings(params).spag.method == "online"
    for n in range(1, design["epochs"] + 1):
        epoch = str(n)
        if _done(root, f"epoch_{epoch}"):
            _drop_model(layout, n - 1, keep_models)  # a kill between marking epoch n and deleting epoch n - 1
            continue
        t0 = time.perf_counter()
        if not online:
            _stage(play, root, epoch)
            _stage(reward, root, epoch)
        _stage(train, root, epoch)
        write_strategy(
            layout.metrics / "epochs" / epoch,
            read_strategy(layout.model(f"epoch_{epoch}"), params, seed, design),
        )
        _mark(root, f"epoch_{epoch}", seconds=round(time.perf_counter() - t0, 1))
        _drop_model(
            layout, n - 1, keep_models
        )  # only once epoch n is marked: a resumed run never needs it again
    last = design["epochs"]
    _comparable(design, root, params, seed, last, start_root, start)
    _mark(root, "finished", seconds=round(time.perf_counter() - began, 1))
    _drop_model(layout, last, keep_models)
    print(f"[kuhn_experiment] {name}: finished in {time.perf_counter() - began:.0f} s", flush=True)


def _drop_model(layout: Layout, epoch: int, keep: bool) -> None:
    """Delete the checkpoint of ``epoch`` (one this script's runs trained; never the start's, epoch 0)."""
    if not keep and epoch >= 1:
        shutil.rmtree(layout.model(f"epoch_{epoch}"), ignore_errors=True)


def _comparable(
    design: dict, root: Path, params: Path, seed: int, last: int, start_root: Path, start: str
) -> None:
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
            raise DesignError(f"--only: {', '.join(unknown)}: not a run of the design")
        names = [n for n in names if n in only]
    hold_design(design, out)
    began = time.perf_counter()
    for k, name in enumerate(names, 1):
        print(f"[kuhn_experiment] run {k}/{len(names)}: {name}", flush=True)
        run_one(design, out, name, keep_models)
    print(f"[kuhn_experiment] {len(names)} runs in {time.perf_counter() - began:.0f} s -> {out}", flush=True)


# ------------------------------------------------------------------------------------------ summary


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "strategy.jsonl").read_text().splitlines()]


def _probabilities(folder: Path, way: str, rows: list[dict] | None = None) -> dict[str, float]:
    """``{"player card history": probability of the aggressive action}`` of one way's rows (``rows``: the
    folder's, read already)."""
    rows = _rows(folder) if rows is None else rows
    return {
        f"{r['player']} {r['card']} {r['history'] or 'opening'}": r["probability"]
        for r in rows
        if r["way"] == way
    }


def call_gap(probabilities: dict[str, float]) -> float:
    """P(call | K, facing a bet) − P(call | J, facing a bet), each the mean of the two information sets that face
    a bet with that card (the second player after a bet, the first after check-bet)."""

    def call(card: str) -> float:
        return (probabilities[f"second {card} bet"] + probabilities[f"first {card} check,bet"]) / 2

    return call("K") - call("J")


def _figures(folder: Path) -> dict:
    return json.loads((folder / FIGURES).read_text())


def judge_criteria(runs: list[dict], criteria: dict, seeds: int) -> dict:
    """The design's criteria over runs ``{"start", "last", "gap_start", "gap_last"}`` (exploitability and call gap
    at the start and the last epoch): (a) the paired change's t interval below ``improvement``, (b) the call gap
    rising by ``call_gap_rise`` in every run, (c) at least ``below_floor_seeds`` runs below ``floor``;
    ``learns``: all three, with every one of the design's ``seeds`` runs there."""
    change = t_interval([r["last"] - r["start"] for r in runs])
    rises = [r["gap_last"] - r["gap_start"] for r in runs]
    below = sum(r["last"] < criteria["floor"] for r in runs)
    a = change["high"] is not None and change["high"] < criteria["improvement"]
    b = all(rise >= criteria["call_gap_rise"] for rise in rises)
    c = below >= criteria["below_floor_seeds"]
    return {
        "a": {**change, "passed": a},
        "b": {"rises": rises, "passed": b},
        "c": {"below_floor": below, "runs": len(runs), "passed": c},
        "complete": len(runs) == seeds,
        "learns": len(runs) == seeds and a and b and c,
    }


def _run_summary(design: dict, root: Path, seed: int) -> dict:
    """One finished run: its figures and probabilities at every checkpoint, and the registered differences."""
    last = design["epochs"]
    metrics = Layout(root).metrics
    folders = {
        "start": metrics / "start",
        **{f"epoch_{n}": metrics / "epochs" / str(n) for n in range(1, last + 1)},
    }
    points = {key: _figures(folder) for key, folder in folders.items()}
    both_exact = all(
        points[k]["exact"]["mass_min"] >= design["strategy"]["mass_threshold"]
        for k in ("start", f"epoch_{last}")
    )
    way = "exact" if both_exact else "played"
    probabilities = {
        key: _probabilities(folder, way) if way in points[key] else _probabilities(folder, "exact")
        for key, folder in folders.items()
    }
    selfplay = [
        json.loads(p.read_text())
        for n in range(1, last + 1)
        if (p := metrics / "epochs" / str(n) / "selfplay.json").exists()
    ]
    before, after = probabilities["start"], probabilities[f"epoch_{last}"]
    return {
        "seed": seed,
        "way": way,
        "last": f"epoch_{last}",
        "seconds": _progress(root)["finished"]["seconds"],
        "points": points,
        "probabilities": probabilities,
        "call_gap": {key: call_gap(p) for key, p in probabilities.items()},
        "selfplay_foul_rate": [s.get("foul_rate") for s in selfplay],
        "difference": points[f"epoch_{last}"][way]["chips"]["exploitability"]
        - points["start"][way]["chips"]["exploitability"],
        "moved": statistics.fmean(abs(after[k] - before[k]) for k in before),
    }


def _curve(runs: list[dict]) -> dict:
    curve = {}
    for key in runs[0]["points"]:
        for way in ("exact", "played"):
            values = [
                r["points"][key][way]["chips"]["exploitability"] for r in runs if way in r["points"][key]
            ]
            if values:
                curve.setdefault(key, {})[way] = t_interval(values)
        curve[key]["mass_min"] = statistics.fmean(r["points"][key]["exact"]["mass_min"] for r in runs)
    return curve


def _secondary(runs: list[dict], last: int) -> dict:
    secondary = {}
    for key in ("start", f"epoch_{last}"):
        figures = [r["points"][key][r["way"]] for r in runs]
        secondary[key] = {
            "wins_exploitability": statistics.fmean(f["wins"]["exploitability"] for f in figures),
            "vs_equilibrium_first": statistics.fmean(f["chips"]["vs_equilibrium_first"] for f in figures),
            "vs_equilibrium_second": statistics.fmean(f["chips"]["vs_equilibrium_second"] for f in figures),
            "broken_share": statistics.fmean(r["points"][key]["played"]["broken_share"] for r in runs)
            if all("played" in r["points"][key] for r in runs)
            else None,
        }
    secondary["moved"] = t_interval([r["moved"] for r in runs])  # exploratory: not registered
    secondary["probabilities"] = {
        which: {
            k: statistics.fmean(r["probabilities"][which][k] for r in runs)
            for k in runs[0]["probabilities"][which]
        }
        for which in ("start", f"epoch_{last}")
    }
    return secondary


def twin_of_cell(
    design: dict, out: Path, start: str, arm: str, runs: list[dict], card_blind: bool = False
) -> dict:
    """The tabular twin of one cell at each of the design's learning rates (``twin.learning_rate`` and the
    arm's ``twin.matched``), on the cell's settings and seeds, from the start's exact probabilities. With
    ``card_blind`` also each rate's card-blind twin (one update for J, Q and K: a diagnosis, not registered)."""
    from spag.train.twin import TwinLoop, run_twin

    twin, criteria = design["twin"], design.get("criteria")
    start_rows = _rows(out / "starts" / start / "metrics" / "start")
    profile = {(r["card"], r["history"]): r["probability"] for r in start_rows if r["way"] == "exact"}
    rates = {"default": twin["learning_rate"]}
    if arm in twin.get("matched", {}):
        rates["matched"] = twin["matched"][arm]
    variants = [(name, rate, False) for name, rate in rates.items()]
    if card_blind:
        variants += [(f"{name}, card-blind", rate, True) for name, rate in rates.items()]
    result = {}
    for name, rate, blind in variants:
        per_seed = []
        for seed in design["seeds"]:
            loop = dataclasses.replace(
                TwinLoop.of(load_settings(_params_file(out, start, arm, seed, design))),
                learning_rate=rate,
                card_blind=blind,
            )
            points = run_twin(profile, loop, seed)
            per_seed.append(
                {"seed": seed, "points": points, "call_gap": [call_gap(p["probabilities"]) for p in points]}
            )
        curve = [
            t_interval([s["points"][n]["exploitability"] for s in per_seed])
            for n in range(design["epochs"] + 1)
        ]
        entry = {"learning_rate": rate, "card_blind": blind, "runs": per_seed, "curve": curve}
        if criteria:
            entry["criteria"] = judge_criteria(
                [
                    {
                        "start": s["points"][0]["exploitability"],
                        "last": s["points"][-1]["exploitability"],
                        "gap_start": s["call_gap"][0],
                        "gap_last": s["call_gap"][-1],
                    }
                    for s in per_seed
                ],
                criteria,
                len(design["seeds"]),
            )
        result[name] = entry
    return result


def _params_file(out: Path, start: str, arm: str, seed: int, design: dict) -> Path:
    """A run's params.yaml: the one it ran with, or (a twin of a run not played) written beside the runs."""
    path = out / "runs" / f"{start}-{arm}-{seed}" / "params.yaml"
    if not path.exists():
        path = out / "twin-params" / f"{start}-{arm}-{seed}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, params_for(design, start, arm, seed))
    return path


def cfr_reference(epochs: int) -> dict:
    """CFR from the uniform profile: its average policy's exploitability after 1..``epochs`` iterations (one an
    epoch) and after each of :data:`CFR_MARKS`."""
    marks = {}
    curve = []
    for point in cfr_curve(max(epochs, *CFR_MARKS)):
        if point["iteration"] <= epochs:
            curve.append(point["exploitability"])
        if point["iteration"] in CFR_MARKS:
            marks[str(point["iteration"])] = point["exploitability"]
    return {"start": all_figures(constant(0.5))["chips"]["exploitability"], "curve": curve, "after": marks}


def _earlier_runs(earlier: dict | None, design: dict, cell: str) -> dict[int, dict]:
    """``{seed: run}`` of one cell of an earlier summary (``--merge``), which must be of the same design."""
    if earlier is None:
        return {}
    if earlier.get("design") != design:
        raise DesignError("--merge: that summary was made under another design")
    return {r["seed"]: r for r in earlier.get("cells", {}).get(cell, {}).get("runs", [])}


def summarise(design: dict, out: Path, card_blind: bool = False, earlier: dict | None = None) -> dict:
    """Per starting point and arm: every run's figures, the curve, the criteria and the twin (with
    ``card_blind``, its card-blind variants too). ``earlier``: a summary of the same design whose runs stand in
    for those not finished in ``out``."""
    last = design["epochs"]
    criteria = design.get("criteria")
    cells = {}
    for start in design["starts"]:
        for arm in design["arms"]:
            kept = _earlier_runs(earlier, design, f"{start}/{arm}")
            runs = []
            for seed in design["seeds"]:
                if _done(root := out / "runs" / f"{start}-{arm}-{seed}", "finished"):
                    runs.append(_run_summary(design, root, seed))
                elif seed in kept:
                    runs.append(kept[seed])
            cell = {"runs": runs}
            if runs:
                test = t_interval([r["difference"] for r in runs])
                test["passed"] = test["high"] is not None and test["high"] < 0
                cell.update(
                    curve=_curve(runs),
                    test=test,
                    secondary=_secondary(runs, last),
                    ways=sorted({r["way"] for r in runs}),
                    seconds_mean=statistics.fmean(r["seconds"] for r in runs),
                )
                if criteria:
                    cell["criteria"] = judge_criteria(
                        [
                            {
                                "start": r["points"]["start"][r["way"]]["chips"]["exploitability"],
                                "last": r["points"][r["last"]][r["way"]]["chips"]["exploitability"],
                                "gap_start": r["call_gap"]["start"],
                                "gap_last": r["call_gap"][r["last"]],
                            }
                            for r in runs
                        ],
                        criteria,
                        len(design["seeds"]),
                    )
            if (
                "twin" in design
                and (out / "starts" / start / "metrics" / "start" / "strategy.jsonl").exists()
            ):
                cell["twin"] = twin_of_cell(design, out, start, arm, runs, card_blind)
            if runs or "twin" in cell:
                cells[f"{start}/{arm}"] = cell
    result = {"design": design, "equilibrium": all_figures(equilibrium()), "cells": cells}
    if "twin" in design:
        result["cfr"] = cfr_reference(last)
    return result


def starts(design: dict, out: Path) -> dict:
    """Train every starting point of the design and read its exact strategy: ``{start: {"probabilities",
    "figures", "rows", "seconds"}}``, where ``seconds`` is what this call spent on the start (its training
    and reading; next to nothing for a start trained and read before)."""
    prepare_start(design, out, BASE)
    result = {}
    for start in design["starts"]:
        began = time.perf_counter()
        root = prepare_start(design, out, start)
        folder = root / "metrics" / "start"
        if not (folder / FIGURES).exists():
            write_strategy(
                folder,
                read_strategy(start_checkpoint(root, start), root / "params.yaml", 0, design, played=False),
            )
        rows = _rows(folder)
        result[start] = {
            "probabilities": _probabilities(folder, "exact", rows),
            "figures": _figures(folder)["exact"],
            "rows": rows,
            "seconds": round(time.perf_counter() - began, 1),
            "overrides": design["starts"][start],
        }
        print(
            f"[kuhn_experiment] start {start}:\n{strategy_table([r for r in rows if r['way'] == 'exact'])}",
            flush=True,
        )
    return result


def _show(entry: dict | None) -> str:
    if not entry:
        return "–"
    if entry["low"] is None:
        return f"{entry['mean']:.3f}"
    return f"{entry['mean']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


def _passes(verdict: dict) -> str:
    parts = [f"{k} {'yes' if verdict[k]['passed'] else 'no'}" for k in ("a", "b", "c")]
    return (
        ", ".join(parts)
        + f"; learns: {'yes' if verdict['learns'] else 'no'}"
        + ("" if verdict["complete"] else " (seeds missing)")
    )


def markdown(result: dict) -> str:
    design = result["design"]
    last = f"epoch_{design['epochs']}"
    epochs = [f"epoch_{n}" for n in range(1, design["epochs"] + 1)]
    lines = [
        "| start / arm | runs | way | start | "
        + " | ".join(e.replace("_", " ") for e in epochs)
        + " | last − start [95% t] | criteria | s/run |",
        "|---|---:|---|---|" + "---|" * len(epochs) + "---|---|---:|",
    ]
    for name, cell in result["cells"].items():
        if cell["runs"]:
            # the curve on the exact way wherever a run compares on it (every checkpoint has it), else the played
            way = "exact" if "exact" in cell["ways"] else "played"
            played = sum(r["way"] == "played" for r in cell["runs"])
            ways = (
                way
                if played in (0, len(cell["runs"]))
                else f"exact ({played} run{'s' * (played > 1)} played)"
            )
            curve = cell["curve"]
            verdict = (
                _passes(cell["criteria"])
                if "criteria" in cell
                else ("yes" if cell["test"]["passed"] else "no")
            )
            lines.append(
                f"| {name} | {len(cell['runs'])} | {ways} | {_show(curve['start'].get(way))} | "
                + " | ".join(_show(curve[e].get(way)) for e in epochs)
                + f" | {_show(cell['test'])} | {verdict} | {cell['seconds_mean']:.0f} |"
            )
        for rate, twin in cell.get("twin", {}).items():
            change = twin["criteria"]["a"] if "criteria" in twin else None
            lines.append(
                f"| {name}: twin, rate {twin['learning_rate']:g} ({rate}) | {len(twin['runs'])} | exact | "
                + " | ".join(_show(p) for p in twin["curve"])
                + f" | {_show(change)} | "
                + (_passes(twin["criteria"]) if "criteria" in twin else "–")
                + " | – |"
            )
    if "cfr" in result:
        cfr = result["cfr"]
        after = ", ".join(f"{n} iterations {v:.4f}" for n, v in cfr["after"].items())
        lines.append(
            f"| CFR from uniform, an iteration an epoch | – | exact | {cfr['start']:.3f} | "
            + " | ".join(f"{v:.3f}" for v in cfr["curve"])
            + f" | {after} | – | – |"
        )
    if not any(cell["runs"] for cell in result["cells"].values()):
        return "\n".join(lines)
    lines += [
        "",
        "| start / arm | win/loss exploitability, start → last | vs equilibrium as first / second, start → "
        "last | rule-breaking replies (played), start → last | mean abs. change of the 12 probabilities |",
        "|---|---|---|---|---|",
    ]

    def pair(a, b, digits=3):
        return "–" if a is None or b is None else f"{a:.{digits}f} → {b:.{digits}f}"

    for name, cell in result["cells"].items():
        if not cell["runs"]:
            continue
        before, after = cell["secondary"]["start"], cell["secondary"][last]
        lines.append(
            f"| {name} | {pair(before['wins_exploitability'], after['wins_exploitability'])} | "
            f"{pair(before['vs_equilibrium_first'], after['vs_equilibrium_first'])} / "
            f"{pair(before['vs_equilibrium_second'], after['vs_equilibrium_second'])} | "
            f"{pair(before['broken_share'], after['broken_share'], 2)} | {_show(cell['secondary']['moved'])} |"
        )
    return "\n".join(lines)


def _read_earlier(path: Path) -> dict:
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DesignError(f"--merge: {path}: cannot be read as JSON ({type(exc).__name__})") from None
    if not isinstance(earlier, dict) or not isinstance(earlier.get("cells"), dict):
        raise DesignError(f"--merge: {path}: not a summary of this script (no cells)")
    return earlier


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("run", "summarise", "starts"))
    parser.add_argument("--design", type=Path, default=ROOT / "experiments" / "kuhn-positive-control.yaml")
    parser.add_argument("--out", type=Path, default=Path("runs/kuhn"))
    parser.add_argument("--only", help="comma-separated runs START-ARM-SEED")
    parser.add_argument("--keep-models", action="store_true")
    parser.add_argument("-o", "--output", type=Path, help="summarise: the JSON")
    parser.add_argument(
        "--overwrite", action="store_true", help="summarise: replace -o if this script wrote it"
    )
    parser.add_argument(
        "--card-blind",
        action="store_true",
        help="summarise: also the card-blind twin at each rate (a diagnosis, not registered)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        help="summarise: an earlier summary whose runs stand in for those not finished in --out",
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    try:
        design = read_design(args.design)
        if args.command == "run":
            run(design, out, args.only.split(",") if args.only else None, args.keep_models)
            return 0
        if (out / "design.json").exists() or args.command == "starts":
            hold_design(design, out)
        if args.command == "starts":
            result = starts(design, out)
            if args.output:
                claim_file(args.output, "-o", replace_mode(args.overwrite))
                write_json_atomic(args.output, result)
            print(
                f"[kuhn_experiment] {len(result)} starts in {out}"
                + (f" -> {args.output}" if args.output else "")
            )
            return 0
        earlier = _read_earlier(args.merge) if args.merge else None
        result = summarise(design, out, args.card_blind, earlier)
        if args.output:
            claim_file(args.output, "-o", replace_mode(args.overwrite))
            write_json_atomic(args.output, result)
    except (DesignError, OutputRefused) as exc:
        return fail(str(exc))
    print(markdown(result))
    finished = sum(len(c["runs"]) for c in result["cells"].values())
    print(
        f"[kuhn_experiment] summary of {finished} of {len(run_names(design))} runs"
        + (f" -> {args.output}" if args.output else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
