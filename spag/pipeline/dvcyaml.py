"""``dvc.yaml``, written from the stage table (:data:`spag.pipeline.table.STAGES`) and the code each stage runs.

``python -m spag.pipeline.dvcyaml`` rewrites ``dvc.yaml``; ``python -m spag.pipeline.dvcyaml --check`` says whether it is
current (a test runs the check). Nothing here runs in a stage, so editing it re-runs nothing.

Each stage depends on its ``stages/NAME.py`` and on the ``spag/`` files it runs, so that ``dvc status``
and ``dvc repro`` see a change of code as they see a change of data or params. Which files a stage runs
is read from the imports (:func:`stage_files`), by this rule:

- a stage runs its own module, ``spag/pipeline/stages/NAME.py``, which imports at its top the code the
  stage runs (and :mod:`spag.pipeline.run`, which every stage runs);
- a module a stage reaches by name is *used*: any of its functions may run, so every import it makes, at
  its top or inside a function, is followed, except the few lazy imports in :data:`NOT_RUN`, which no stage
  can get to;
- a package that is only loaded is not: importing ``spag.evaluate.benchmark`` runs
  ``spag/evaluate/__init__.py``, but defining functions no stage calls cannot change what a stage writes (a
  package is used, and so a dependency, when a module imports a name from the package itself: ``from
  spag.players import load_player``);
- a module's data files (:data:`DATA`: prompt templates, SQL queries, the general SFT rows, the offline
  benchmark tasks) go with it;
- the command line (``spag/cli.py``, ``spag/commands/``) is never reached: no stage imports it.

So ``spag/rewards/build.py`` is a dependency of ``reward@N`` and ``imitation_data``, which build rows, and
not of ``train@N``, which only reads the rows they wrote (DVC re-runs it when those change).
"""

from __future__ import annotations

import sys

import yaml

from spag.pipeline.imports import MODULES, ROOT, read_module
from spag.pipeline.table import STAGES, Stage

# Lazy imports a stage cannot get to, though it uses the module that makes them: (module, import) -> why.
NOT_RUN = {
    ("spag.players.provenance", "spag.players.vllm"): "player_provenance of a vllm player: only stages that load "
                                              "players call it, and they reach the backend through spag.players",
}

# The files a module reads besides its code (a folder: all of it).
DATA = {
    "spag.game.taboo.prompts": ("spag/game/taboo/templates.yaml",),
    "spag.game.taboo.original_prompts": ("spag/game/taboo/original_prompts.yaml",),
    "spag.rewards.sft": ("spag/rewards/data/general_sft.jsonl",),
    "spag.analyze": ("spag/analyze/queries",),
    "spag.game.taboo": ("spag/game/taboo/queries", "spag/game/taboo/fresh_eval_words.txt"),
    "spag.evaluate.benchmark": ("spag/evaluate/tasks",),
}
# Files under spag/ that no stage reads: the source the general SFT rows are built from (by hand, with
# spag/rewards/data/build_general_sft.py).
NOT_READ = ("spag/rewards/data/general_sft_source.yaml",)

# The plots of the report's outputs, as `dvc plots show` draws them.
PLOTS = [
    {"Score against the imitation model (95% interval)": {
        "template": "interval", "x": "epoch", "y": {"metrics/plots/vs_imitation.csv": "value"}}},
    {"Self-play outcome rates (95% interval)": {
        "template": "interval", "x": "epoch", "y": {"metrics/plots/selfplay_rates.csv": "value"}}},
    {"Self-play lengths": {
        "template": "interval", "x": "epoch", "y": {"metrics/plots/selfplay_lengths.csv": "value"}}},
    {"Self-play variety: shares of replies, action entropy in bits": {
        "template": "interval", "x": "epoch", "y": {"metrics/plots/selfplay_collapse.csv": "value"}}},
    {"Benchmark score per task (epoch 0 = imitation)": {
        "template": "interval", "x": "epoch", "y": {"metrics/plots/benchmark.csv": "value"}}},
    {"Reasoning: pooled accuracy B - A, paired, 95% interval (epoch 0 = imitation vs base)": {
        "template": "interval", "x": "epoch", "y": {"metrics/plots/reasoning.csv": "value"}}},
    {"Kuhn poker: exploitability in chips a hand, exact and as played (epoch -1 = base, 0 = imitation)": {
        "template": "interval", "x": "epoch", "y": {"metrics/plots/exploitability.csv": "value"}}},
    "metrics/learning_curves.png",
    {"dvclive/imitate/plots/metrics": {"x": "step"}},
    {"dvclive/epoch_1/plots/metrics": {"x": "step"}},
    {"dvclive/epoch_2/plots/metrics": {"x": "step"}},
]

HEADER = """\
# SPAG as a pipeline: imitation learning on a teacher's winning games, then epochs of
# self-play -> rule-based rewards -> offline policy optimisation -> evaluation.
# Every stage validates params.yaml and makes one call to spag.pipeline; outputs are versioned in the DVC cache.
# `dvc metrics show` prints the headline (metrics/summary.json); each stage's own figures are plain outputs
# under metrics/, shown with `dvc metrics show metrics/epochs/1/games.json` (any JSON file by its path).
#
# Written by `python -m spag.pipeline.dvcyaml` from the stage table in spag/pipeline/table.py: edit that, not this file.
# Each stage depends on the spag/ files it runs (the rule: spag/pipeline/dvcyaml.py).
"""


def stage_files(stage: Stage) -> list[str]:
    """The files under ``spag/`` that ``stage`` runs or reads (see the module docstring), sorted."""
    used: set[str] = set()
    todo = [f"spag.pipeline.stages.{stage.name}"]
    while todo:
        module = todo.pop()
        if module in used or module not in MODULES:
            continue
        used.add(module)
        parsed = read_module(module)
        lazy = {m for ms in parsed.inside.values() for m in ms}
        todo.extend(m for m in parsed.top | lazy if (module, m) not in NOT_RUN)
    files = {MODULES[m].relative_to(ROOT).as_posix() for m in used}
    files |= {data for m in used for data in DATA.get(m, ())}
    return sorted(files)


# ------------------------------------------------------------------------------------- the file


def _epoch(text: str) -> str:
    return text.replace("{epoch}", "${key}").replace("{previous}", "${item.previous}")


def _entry(stage: Stage) -> dict:
    command = f"python stages/{stage.name}.py" + (" ${key}" if stage.per_epoch else "")
    entry: dict = {"cmd": command,
                   "deps": [f"stages/{stage.name}.py", *map(_epoch, stage.deps), *stage_files(stage)],
                   "params": [_epoch(key) for key in stage.params]}
    outs = [_epoch(path) if cached else {_epoch(path): {"cache": False}} for path, cached in stage.outs]
    if outs:
        entry["outs"] = outs
    if stage.metrics:
        entry["metrics"] = [{path: {"cache": False}} for path in stage.metrics]
    if stage.plots:
        entry["plots"] = [{path: {"cache": False}} for path in stage.plots]
    return {"foreach": "${spag.epochs}", "do": entry} if stage.per_epoch else entry


def render() -> str:
    """The text of ``dvc.yaml``."""
    def dump(data) -> str:
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=110)

    parts = [HEADER, "\nstages:\n"]
    for stage in STAGES:
        every = "every SPAG epoch: " if stage.per_epoch else ""
        body = dump({stage.name: _entry(stage)})
        parts.append(f"  # {every}{stage.doc}\n" + "".join(f"  {line}\n" for line in body.splitlines()) + "\n")
    parts.append(dump({"plots": PLOTS}))
    return "".join(parts)


def main(argv: list[str]) -> int:
    target = ROOT / "dvc.yaml"
    text = render()
    if argv == ["--check"]:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            print(f"{target} is not what spag/pipeline/table.py declares: run `python -m spag.pipeline.dvcyaml`", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: python -m spag.pipeline.dvcyaml [--check]", file=sys.stderr)
        return 2
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({len(STAGES)} stages)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
