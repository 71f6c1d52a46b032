"""``dvc.yaml``, written from the stage table (:data:`spag.pipeline.table.STAGES`) and the code each stage runs.

``python -m spag.pipeline.dvcyaml`` rewrites ``dvc.yaml``; ``python -m spag.pipeline.dvcyaml --check`` says whether it is
current (a test runs the check). It is harness: no stage's work imports it, so editing it re-runs nothing.

Each stage depends on its ``stages/NAME.py`` and on the ``spag/`` files it runs, so that ``dvc status``
and ``dvc repro`` see a change of code as they see a change of data or params. Which files a stage runs
is read from the imports (:func:`stage_files`), by this rule:

- a stage runs its own module, ``spag/pipeline/stages/NAME.py``, which imports at its top the code the
  stage runs (and :mod:`spag.pipeline.context`, what every stage is handed);
- the harness around it is not a dependency: ``stages/NAME.py`` hands the stage's function to
  :mod:`spag.pipeline.run`, which validates the params, runs the preflight and tunes the process, none of
  which changes what the stage writes (the params it reads are tracked as params); no stage's module
  imports the harness (a test holds it), so editing the preflight re-runs nothing;
- the output harness a stage calls around its work (:mod:`spag.harness`: the output rule, claims, locks,
  manifests, the process, experiment tracking) is not a dependency either, though the core code it calls is
  followed: editing the output rule re-runs nothing, editing the trainer that :mod:`spag.harness.training`
  calls re-runs the training stages;
- a module a stage reaches by name is *used*: any of its functions may run, so every import it makes, at
  its top or inside a function, is followed, except the few lazy imports in :data:`NOT_RUN`, which no stage
  can get to, those of :data:`ONLY_IN`, which only the stages named there get to, and the harness's imports
  in :data:`PROCESS_TUNING`, which tune the process (the memory plan that says whether one process runs
  DeepSpeed);
- a player backend (:data:`BACKEND_MODULES`) is followed where the stage's params choose it
  (:func:`stage_backends`): ``dvc.yaml`` is written for ``params.yaml``'s backends, and a stage started on a
  backend its entry does not list is refused until ``make dvc.yaml`` has been run
  (:func:`missing_dependencies`, which the harness runs before a stage);
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
from pathlib import Path

import yaml

from spag.config import Settings, load_settings
from spag.pipeline.imports import MODULES, ROOT, read_module
from spag.pipeline.table import STAGES, Stage

# Lazy imports a stage cannot get to, though it uses the module that makes them: (module, import) -> why.
NOT_RUN = {
    (
        "spag.players.provenance",
        "spag.players.vllm",
    ): "player_provenance of a vllm player: only stages that load "
    "players call it, and they reach the backend through spag.players",
}
# Imports of the harness that tune the process, not what a stage computes: not followed. (module, import) -> why.
PROCESS_TUNING = {
    (
        "spag.harness.zero",
        "spag.models.memory",
    ): "the memory plan decides whether one process on a GPU runs DeepSpeed, as the preflight's plan decides "
    "nothing a stage writes",
}
# Lazy imports that only some stages get to, whatever the params: (module, import) -> those stages.
ONLY_IN = {  # spag.method: online; imitate.method has no online
    ("spag.harness.launch", "spag.train.online"): ("train",),
    ("spag.harness.training", "spag.train.online"): ("train",),
}
HARNESS = "spag.harness"  # walked through for the core it calls, never a dependency itself
# The player backends spag.players.load_player imports where one is chosen: a stage follows the import of
# each backend its params choose (:func:`stage_backends`), and of no other.
BACKEND_MODULES = {
    "spag.players.hf": "hf",
    "spag.players.vllm": "vllm",
    "spag.players.openai": "openai",
    "spag.players.human": "human",
}
# The player sections whose ``backend`` a stage plays on when it declares the section (or its backend).
PLAYER_SECTIONS = ("teacher", "play", "evaluate")

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
    {
        "Score against the imitation model (95% interval)": {
            "template": "interval",
            "x": "epoch",
            "y": {"metrics/plots/vs_imitation.csv": "value"},
        }
    },
    {
        "Self-play outcome rates (95% interval)": {
            "template": "interval",
            "x": "epoch",
            "y": {"metrics/plots/selfplay_rates.csv": "value"},
        }
    },
    {
        "Self-play lengths": {
            "template": "interval",
            "x": "epoch",
            "y": {"metrics/plots/selfplay_lengths.csv": "value"},
        }
    },
    {
        "Self-play variety: shares of replies, action entropy in bits": {
            "template": "interval",
            "x": "epoch",
            "y": {"metrics/plots/selfplay_collapse.csv": "value"},
        }
    },
    {
        "Benchmark score per task (epoch 0 = imitation)": {
            "template": "interval",
            "x": "epoch",
            "y": {"metrics/plots/benchmark.csv": "value"},
        }
    },
    {
        "Reasoning: pooled accuracy B - A, paired, 95% interval (epoch 0 = imitation vs base)": {
            "template": "interval",
            "x": "epoch",
            "y": {"metrics/plots/reasoning.csv": "value"},
        }
    },
    {
        "Kuhn poker: exploitability in chips a hand, exact and as played (epoch -1 = base, 0 = imitation)": {
            "template": "interval",
            "x": "epoch",
            "y": {"metrics/plots/exploitability.csv": "value"},
        }
    },
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


def stage_backends(stage: Stage, settings) -> set[str]:
    """The player backends ``stage`` can play on with ``settings``: hf (the skill metrics, the baselines and
    the strategy are read on it), and the backend of each player section it declares."""
    declared = set(stage.params)
    return {"hf"} | {
        getattr(settings, section).backend
        for section in PLAYER_SECTIONS
        if section in declared or f"{section}.backend" in declared
    }


def _followed(stage: Stage, module: str, imported: str, backends: set[str]) -> bool:
    if (module, imported) in NOT_RUN or (module, imported) in PROCESS_TUNING:
        return False
    if stage.name not in ONLY_IN.get((module, imported), (stage.name,)):
        return False
    if module == "spag.players" and imported in BACKEND_MODULES:  # load_player's import of a backend
        return BACKEND_MODULES[imported] in backends
    return True


def _in_harness(module: str) -> bool:
    return module == HARNESS or module.startswith(HARNESS + ".")


def stage_files(stage: Stage, settings=None) -> list[str]:
    """The files under ``spag/`` that ``stage`` runs or reads with ``settings`` (None: the params file's, read
    from ``params.yaml``) (see the module docstring), sorted."""
    backends = stage_backends(stage, settings if settings is not None else project_settings())
    used: set[str] = set()
    todo = [f"spag.pipeline.stages.{stage.name}"]
    while todo:
        module = todo.pop()
        if module in used or module not in MODULES:
            continue
        used.add(module)
        parsed = read_module(module)
        lazy = {m for ms in parsed.inside.values() for m in ms}
        todo.extend(m for m in parsed.top | lazy if _followed(stage, module, m, backends))
    files = {MODULES[m].relative_to(ROOT).as_posix() for m in used if not _in_harness(m)}
    files |= {data for m in used for data in DATA.get(m, ())}
    files.add("spag/__init__.py")  # spag's version: a new version re-runs every stage
    return sorted(files)


def project_settings():
    """The settings of the project's ``params.yaml`` (the defaults where there is none)."""
    path = ROOT / "params.yaml"
    return load_settings(path) if path.exists() else Settings()


def missing_dependencies(root: Path, name: str, settings) -> list[str]:
    """The files stage ``name`` runs with ``settings`` that ``root/dvc.yaml`` does not list among its deps (a
    backend the params chose after dvc.yaml was written); [] where the stage plays on hf alone (every
    dvc.yaml lists it), where there is no dvc.yaml (a stage run outside DVC) or no entry for the stage."""
    stage = next(s for s in STAGES if s.name == name)
    path = root / "dvc.yaml"
    if stage_backends(stage, settings) == {"hf"} or not path.exists():
        return []
    try:
        loaded = yaml.load(
            path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        )
    except yaml.YAMLError:
        return []
    entry = ((loaded or {}).get("stages") or {}).get(name)
    if not isinstance(entry, dict):
        return []
    listed = set((entry.get("do", entry) or {}).get("deps") or ())
    return [f for f in stage_files(stage, settings) if f not in listed]


# ------------------------------------------------------------------------------------- the file


def _epoch(text: str) -> str:
    return text.replace("{epoch}", "${key}").replace("{previous}", "${item.previous}")


def _entry(stage: Stage, settings) -> dict:
    command = f"python stages/{stage.name}.py" + (" ${key}" if stage.per_epoch else "")
    entry: dict = {
        "cmd": command,
        "deps": [f"stages/{stage.name}.py", *map(_epoch, stage.deps), *stage_files(stage, settings)],
        "params": [_epoch(key) for key in stage.params],
    }
    outs = [_epoch(path) if cached else {_epoch(path): {"cache": False}} for path, cached in stage.outs]
    if outs:
        entry["outs"] = outs
    if stage.metrics:
        entry["metrics"] = [{path: {"cache": False}} for path in stage.metrics]
    if stage.plots:
        entry["plots"] = [{path: {"cache": False}} for path in stage.plots]
    return {"foreach": "${spag.epochs}", "do": entry} if stage.per_epoch else entry


def render(settings=None) -> str:
    """The text of ``dvc.yaml`` for ``settings`` (None: ``params.yaml``'s): the backends they choose decide
    which backends' code the stages that play depend on."""
    settings = settings if settings is not None else project_settings()

    def dump(data) -> str:
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=110)

    parts = [HEADER, "\nstages:\n"]
    for stage in STAGES:
        every = "every SPAG epoch: " if stage.per_epoch else ""
        body = dump({stage.name: _entry(stage, settings)})
        parts.append(
            f"  # {every}{stage.doc}\n" + "".join(f"  {line}\n" for line in body.splitlines()) + "\n"
        )
    parts.append(dump({"plots": PLOTS}))
    return "".join(parts)


def main(argv: list[str]) -> int:
    target = ROOT / "dvc.yaml"
    text = render()
    if argv == ["--check"]:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            print(
                f"{target} is not what spag/pipeline/table.py declares: run `python -m spag.pipeline.dvcyaml`",
                file=sys.stderr,
            )
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
