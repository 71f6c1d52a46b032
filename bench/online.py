"""How long online self-play takes per step, and per SPAG epoch, at a params file's sizes.

    python bench/online.py [--params params.yaml] [--model DIR] [--steps 3] [--words-per-step W]
                           [--games-per-word G] [--json OUT]

Runs ``--steps`` optimiser steps of ``spag.method: online`` (spag/train/online.py) with the params file's
game, play, online and spag settings (``--words-per-step`` / ``--games-per-word`` replace the online ones),
the model being ``--model``, else ``data/imitation/model``, ``data/base/model``, or the embedded
SmolLM2-135M-Instruct materialised into a temporary folder. Words: ``data/words/train.txt`` when it exists,
else the default run's (wordfreq's nouns), sampled with a fixed seed.

Reported per step (median over the steps after the first, which also packs weights and warms kernels; the
first step is shown on its own): the wall time of the optimiser step, the part spent playing the games,
the rest (log-probs, reference, backward, optimiser), the process's CPU seconds; games and generated
tokens per second of play; and
the set-up (model, reference and trainer loading). From them, the time of one epoch of ``online.words``
words, set-up included: what ``train@N`` takes under ``spag.method: online``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _model(args, work: Path) -> str:
    if args.model:
        return args.model
    for candidate in (ROOT / "data" / "imitation" / "model", ROOT / "data" / "base" / "model"):
        if candidate.is_dir():
            return str(candidate)
    from spag.models.embedded import materialize_base_model

    return str(materialize_base_model(work / "base"))


def _words(settings, n: int) -> list[str]:
    import random

    from spag.game.words import read_words, split_words, top_words

    source = ROOT / "data" / "words" / "train.txt"
    if source.exists():
        words = read_words(source)
    else:
        w = settings.words
        words = split_words(
            top_words(w.top, nouns_only=w.nouns_only, skip_stop_words=w.skip_stop_words), w.eval_fraction
        )[0]
    return random.Random("bench-online").sample(words, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--model")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--words-per-step", type=int)
    parser.add_argument("--games-per-word", type=int)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    from transformers import TrainerCallback

    from spag.config import TrainConfig, TrainKnobs, load_settings
    from spag.game.registry import make_game
    from spag.play.engine import PlayConfig
    from spag.train.online import OnlineGames, online_trainer

    settings = load_settings(args.params)
    online = settings.online.model_copy(
        update={
            k: v
            for k, v in {"words_per_step": args.words_per_step, "games_per_word": args.games_per_word}.items()
            if v is not None
        }
    )
    games = OnlineGames(
        play=PlayConfig(make_game(settings.game), settings.play, settings.seed + 1),
        online=online,
        reward=settings.reward,
    )
    knobs = {k: getattr(settings.spag, k) for k in TrainKnobs.model_fields}
    config = TrainConfig(
        **{**knobs, "save_steps": 10**6},
        max_steps=args.steps,
        seed=settings.seed + 1,
        live=False,
        show_progress=False,
        logging_steps=1,
    )

    class Clock(TrainerCallback):
        """Wall and CPU seconds (this process's user + system: steadier than wall on a busy machine) per step."""

        def __init__(self):
            self.started, self.seconds, self.cpu = (0.0, 0.0), [], []

        def on_step_begin(self, *_, **__):
            self.started = (time.perf_counter(), time.process_time())

        def on_step_end(self, *_, **__):
            self.seconds.append(time.perf_counter() - self.started[0])
            self.cpu.append(time.process_time() - self.started[1])

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = _model(args, work)
        words = _words(settings, online.words_per_step * args.steps)
        began = time.perf_counter()
        run = online_trainer(
            model, words, work / "out", games=games, config=config, episodes_dir=work / "episodes"
        )
        setup = time.perf_counter() - began
        clock = Clock()
        run.trainer.add_callback(clock)
        run.trainer.train()
        history = [e for e in run.trainer.state.log_history if "games/play_seconds" in e]
        totals = run.rollout.totals

    play = [e["games/play_seconds"] for e in history]
    games_per_step = online.words_per_step * online.games_per_word
    later = slice(1, None) if len(clock.seconds) > 1 else slice(None)
    step = statistics.median(clock.seconds[later])
    play_step = statistics.median(play[later])
    steps_per_epoch = settings.online.words // online.words_per_step
    figures = {
        "model": model,
        "steps": len(clock.seconds),
        "words_per_step": online.words_per_step,
        "games_per_word": online.games_per_word,
        "games_per_step": games_per_step,
        "samples_per_step": 2 * online.words_per_step * games.group_size,
        "setup_seconds": round(setup, 1),
        "first_step_seconds": round(clock.seconds[0], 1),
        "step_seconds": round(step, 1),
        "step_cpu_seconds": round(statistics.median(clock.cpu[later]), 1),
        "play_seconds": round(play_step, 1),
        "learn_seconds": round(step - play_step, 1),
        "games_per_second": round(games_per_step / play_step, 2),
        "generated_tokens_per_second": round(totals.generated_tokens / max(totals.seconds, 1e-9), 1),
        "epoch_words": settings.online.words,
        "epoch_steps": steps_per_epoch,
        "epoch_minutes": round((setup + clock.seconds[0] + step * (steps_per_epoch - 1)) / 60, 1),
    }
    print(
        f"{figures['steps']} steps of {games_per_step} games ({figures['samples_per_step']} samples): "
        f"{step:.1f} s a step ({play_step:.1f} s playing, {step - play_step:.1f} s learning; "
        f"{figures['step_cpu_seconds']} CPU s), first step "
        f"{clock.seconds[0]:.1f} s, set-up {setup:.1f} s; {figures['games_per_second']} games/s, "
        f"{figures['generated_tokens_per_second']} tokens/s; an epoch of {settings.online.words} words "
        f"({steps_per_epoch} steps): about {figures['epoch_minutes']} min"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
