"""What every stage shares: params.yaml and the layout of data/ and metrics/."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
METRICS = ROOT / "metrics"
BASE_MODEL = DATA / "base_model"
WORDS = DATA / "words"


def params() -> dict:
    """params.yaml, its switches checked: a bad value stops the stage with one line (exit code 2)."""
    from spag.params import ParamsError, check_params

    with open(ROOT / "params.yaml", encoding="utf-8") as f:
        p = yaml.safe_load(f)
    try:
        return dict(check_params(p, "params.yaml"))
    except ParamsError as exc:
        stop(str(exc))


def stop(message: str) -> None:
    """End the stage on bad input: one line on stderr, exit code 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def param_file(p: dict, section: str, key: str) -> str:
    """The existing file that params key ``section.key`` names (or stop)."""
    from spag.params import ParamsError, existing_file

    try:
        return existing_file(p, section, key)
    except ParamsError as exc:
        stop(str(exc))


def model_dir(name: str) -> Path:
    """A checkpoint by its pipeline name: "imitation", "epoch_1", ..."""
    return DATA / name / "model"


def epoch_dir(epoch: int | str) -> Path:
    return DATA / f"epoch_{epoch}"


def epoch_arg() -> str:
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: python {sys.argv[0]} EPOCH")
    return sys.argv[1]


# PlayConfig fields that a params section (teacher, play, evaluate) may set.
_PLAY_KNOBS = ("temperature", "top_k", "max_new_tokens", "batch_size", "examples", "foul_retries",
               "coached_attacker", "final_guess")


def sample_words(path: Path, n: int, seed: str) -> list[str]:
    """A seeded sample of ``n`` words from a word list, spread over its frequency range."""
    import random

    from spag.words import read_words

    words = read_words(path)
    return random.Random(seed).sample(words, min(n, len(words)))


def play_config(p: dict, section: str, seed: int):
    """The PlayConfig for a params section, with the game's max_turns."""
    from spag.play import PlayConfig

    cfg = p[section]
    knobs = {k: cfg[k] for k in _PLAY_KNOBS if cfg.get(k) is not None}
    return PlayConfig(max_turns=p["game"]["max_turns"], seed=seed, rules=p["game"]["rules"],
                      templates=templates_file(p), **knobs)


def templates_file(p: dict) -> str | None:
    """The prompt templates file of `game.templates` (None: the shipped templates)."""
    return param_file(p, "game", "templates") if p["game"]["templates"] else None


def player_options(cfg: dict) -> dict:
    """Backend options a params section may set: dtype and device (hf/vllm), base_url (openai)."""
    return {k: cfg[k] for k in ("dtype", "device", "base_url") if cfg.get(k) is not None}


def previous_model(p: dict, epoch: str) -> Path:
    epochs = {str(k): v for k, v in p["spag"]["epochs"].items()}
    return model_dir(epochs[epoch]["previous"])


# Training knobs that params.yaml may set, mapped to `spag train` options.
_TRAIN_KNOBS = ("learning_rate", "batch_size", "grad_accum", "max_length", "warmup_ratio", "lr_scheduler",
                "kl_coeff", "clip_range", "sft_coeff", "reduction", "detach_advantage", "deepspeed",
                "gradient_checkpointing", "lora_r", "bf16", "save_steps")


def train(method: str, model: Path, data: Path, output: Path, live_dir: Path, cfg: dict, seed: int) -> None:
    """Run `spag train` in-process, or under ``cfg["launcher"]`` (e.g. accelerate launch) on several GPUs."""
    knobs = {k: cfg[k] for k in _TRAIN_KNOBS if cfg.get(k) is not None}
    epochs = cfg["epochs_per_iteration"] if "epochs_per_iteration" in cfg else cfg["epochs"]
    ref_cache = DATA / "cache" / "reference"
    if not cfg.get("launcher"):
        from spag.train.trainer import run_training

        # overwrite: a stage's output is replaced when it is a previous `spag train` output, never otherwise
        run_training(method, str(model), data, output, epochs=epochs, seed=seed, live_dir=live_dir,
                     ref_cache_dir=ref_cache, logging_steps=1, overwrite=True, **knobs)
        return
    import shlex
    import subprocess

    args = [*shlex.split(cfg["launcher"]), "-m", "spag.cli", "train", "--method", method, "--model", str(model),
            "--data", str(data), "-o", str(output), "--epochs", str(epochs), "--seed", str(seed),
            "--live-dir", str(live_dir), "--ref-cache-dir", str(ref_cache), "--overwrite"]
    for key, value in knobs.items():
        flag = "--" + key.replace("_", "-")
        if key == "detach_advantage":
            args += ["--detach-advantage" if value else "--attached-advantage"]
        elif isinstance(value, bool):
            args += [flag] if value else []
        else:
            args += [flag, str(value)]
    subprocess.run(args, check=True)
