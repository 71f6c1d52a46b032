"""A SPAG epoch's time on one GPU, computed from what a GPU check measured (bench/gpu.py's JSON) and what a
preset asks for (configs/paper.yaml with configs/one-gpu.yaml by default): the figure of one-gpu.yaml's
header, with the source of every rate and every assumption named.

    python bench/epoch.py CHECK.json [--params configs/paper.yaml] [--override configs/one-gpu.yaml ...]
                          [--reply-tokens 120] [--rows-per-game 2.5] [--row-tokens 600] [--sft-row-tokens 250]
                          [--json OUT]

The work, from the settings:

- play@N: ``play.words`` games of ``2 x game.max_turns`` replies, each of ``--reply-tokens`` (ASSUMED: every
  game runs its full length, at a mean reply length nothing has measured at this size);
- train@N (offline-po): ``--rows-per-game`` winning lines a game of ``--row-tokens`` tokens (ASSUMED), and
  ``reward.sft_limit`` general rows of ``--sft-row-tokens`` (ASSUMED), ``spag.epochs_per_iteration`` passes;
- evaluate@N's games: ``evaluate.words`` x ``evaluate.seeds`` x 2 roles, against the imitation model and, with
  ``evaluate.vs_previous``, the previous epoch (with ``evaluate.vs_baseline``, the strongest baseline too), at the
  same reply length.

The rates, from the check:

- playing: the generated tokens/s of the hf engine (the ``counter`` side; with ``decoder: generate`` the
  ``static`` side) in the largest ``play-bN`` part whose N the stage's ``batch_size`` reaches (the smallest
  where it reaches none). The part's time includes its prompts' prefill, over one round of replies of up to
  32 tokens. No part runs vLLM (the lent GPU image has none): where the preset plays on vLLM, the hf engine's
  rate stands in, and the line says so;
- training: the steady tokens/s of ``offline-po-Rx2048`` (the reference on the fly, no DeepSpeed, every
  weight trained) whose R is nearest the stage's ``batch_size``. With LoRA (``spag.lora_r``) the step does
  less (no weight gradients of the frozen weights), so the time is an upper bound, and the line says so.

What it leaves out, named in the output: reward@N (CPU work of a minute or so), evaluate@N's skill metrics and
benchmarks, the baselines and imitation stages (once per run, not per epoch).

``--json`` writes the figures too (atomically), to a new file or over an earlier one of this script's; any
other file there, the check's JSON among them, is left as it is. Exit code 2 with one line naming the file,
part or key when the check or the settings cannot give a figure, or the JSON cannot be written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from outputs import owned_or_new

ASSUMED = {  # what nothing has measured for a 1.5B model playing Adversarial Taboo (one-gpu.yaml's header)
    "reply_tokens": 120,
    "rows_per_game": 2.5,
    "row_tokens": 600,
    "sft_row_tokens": 250,
}
TRAIN_LENGTH = 2048  # the training parts' rows: offline-po-Rx2048
OUTPUT_MARK = "bench/epoch.py"  # the --json file's "estimate": what it may replace


class EstimateError(Exception):
    """A check or settings that give no figure: one line, naming what is missing."""


def finished_parts(check: dict) -> dict[str, dict]:
    """Each part of the check that ran through (status ``ok``) and its result."""
    parts = check.get("parts")
    return {
        part: entry["result"]
        for part, entry in (parts.items() if isinstance(parts, dict) else ())
        if isinstance(entry, dict) and entry.get("status") == "ok" and isinstance(entry.get("result"), dict)
    }


def rate_of(figures) -> float | None:
    return float(figures) if isinstance(figures, (int, float)) and figures > 0 else None


def played_rate(check: dict, stage: str, batch_size: int, side: str) -> tuple[float, str]:
    """The generated tokens/s of ``side`` in the largest ``play-bN`` part with N <= ``batch_size`` (the smallest
    part where none is), and where it came from."""
    measured = {}
    for part, result in finished_parts(check).items():
        found = re.fullmatch(r"play-b(\d+)", part)
        played = (result.get("sides") or {}).get(side) if found else None
        rate = rate_of(played.get("generated_tokens_per_s")) if isinstance(played, dict) else None
        if rate:
            measured[int(found[1])] = (part, rate)
    if not measured:
        raise EstimateError(f"{stage}: no play-bN part of the check measured the {side!r} side")
    within = [n for n in measured if n <= batch_size]
    part, rate = measured[max(within) if within else min(measured)]
    return rate, f"{part}, the hf engine's {side!r} side"


def trained_rate(check: dict, method: str, rows: int) -> tuple[float, str, float | None]:
    """The steady tokens/s of the ``METHOD-Rx2048`` part whose R is nearest ``rows``, where it came from, and its
    MFU."""
    measured = {}
    for part, result in finished_parts(check).items():
        found = re.fullmatch(rf"{re.escape(method)}-(\d+)x{TRAIN_LENGTH}", part)
        rate = rate_of(result.get("steady_tokens_per_s")) if found else None
        if rate:
            measured[int(found[1])] = (part, rate, result.get("mfu"))
    if not measured:
        raise EstimateError(f"train@N: no {method}-Rx{TRAIN_LENGTH} part of the check finished with a rate")
    part, rate, mfu = measured[min(measured, key=lambda n: (abs(n - rows), n))]
    return rate, part, mfu


def estimate(settings, check: dict, assumed: dict) -> dict:
    """Each stage's work, rate, hours and the rate's source; the epoch's total; what is left out."""
    # another game's replies are counted otherwise (Kuhn poker's: a word each)
    if settings.game.name != "taboo":
        raise EstimateError(
            f"game.name: {settings.game.name}: the estimate counts Adversarial Taboo's replies"
        )
    if settings.spag.method != "offline-po":
        raise EstimateError(f"spag.method: {settings.spag.method}: the estimate covers offline-po epochs")
    replies = 2 * settings.game.max_turns  # a game played to its end
    stages = {}

    def playing(stage: str, section, games: int) -> dict:
        side = "static" if section.decoder == "generate" else "counter"
        rate, source = played_rate(check, stage, section.batch_size, side)
        notes = []
        if section.backend != "hf":
            notes.append(
                f"plays on {section.backend}, which no part of the check runs: the hf engine's rate stands in"
            )
        tokens = games * replies * assumed["reply_tokens"]
        return {
            "work": f"{games:,} games x {replies} replies x {assumed['reply_tokens']} tokens (assumed)",
            "tokens": tokens,
            "tokens_per_s": round(rate, 1),
            "source": source,
            "hours": tokens / rate / 3600,
            "notes": notes,
        }

    stages["play@N"] = playing("play@N", settings.play, settings.play.words)
    spag = settings.spag
    rate, part, mfu = trained_rate(check, "offline-po", spag.batch_size)
    game_rows = settings.play.words * assumed["rows_per_game"]
    general = settings.reward.sft_limit or 0
    tokens = (
        game_rows * assumed["row_tokens"] + general * assumed["sft_row_tokens"]
    ) * spag.epochs_per_iteration
    notes = []
    if spag.lora_r:
        notes.append(f"LoRA (rank {spag.lora_r}) does less than the part's full training: an upper bound")
    if spag.deepspeed:
        notes.append("the stage runs DeepSpeed, the part does not")
    stages["train@N"] = {
        "work": (
            f"{game_rows:,.0f} game rows x {assumed['row_tokens']} tokens and {general:,} general rows x "
            f"{assumed['sft_row_tokens']} tokens (assumed), {spag.epochs_per_iteration:g} pass(es)"
        ),
        "tokens": round(tokens),
        "tokens_per_s": round(rate, 1),
        "source": f"{part}, MFU {mfu}" if mfu is not None else part,
        "hours": tokens / rate / 3600,
        "notes": notes,
    }
    evaluate = settings.evaluate
    opponents = 1 + bool(evaluate.vs_previous) + bool(evaluate.vs_baseline)
    stages["evaluate@N"] = playing("evaluate@N", evaluate, evaluate.words * evaluate.seeds * 2 * opponents)
    epoch = stages["play@N"]["hours"] + stages["train@N"]["hours"]
    device = finished_parts(check).get("device", {}).get("name")
    return {
        "check": {
            "date": check.get("date"),
            "device": device,
            "cpu_mode": check.get("cpu_mode"),
            "spag": check.get("spag"),
        },
        "assumed": assumed,
        "stages": stages,
        "epoch_hours": epoch,
        "with_evaluation_hours": epoch + stages["evaluate@N"]["hours"],
        "left_out": [
            "reward@N (CPU work)",
            "evaluate@N's skill metrics and benchmarks",
            "the baselines and imitation stages (once a run)",
            *(["play@N's games on the held-out words"] if settings.play.include_held_out else []),
        ],
    }


def hours(value: float) -> str:
    return f"{value:.2f} h" if value >= 1 else f"{value * 60:.1f} min"


def report(figures: dict, preset: str) -> None:
    check = figures["check"]
    print(
        f"one SPAG epoch of {preset} from the check of {check['date']} on {check['device']} (spag {check['spag']})"
    )
    if check["cpu_mode"]:
        print("note: a --cpu check (toy shapes and sizes): its rates say nothing of a GPU")
    for stage, row in figures["stages"].items():
        print(
            f"  {stage:<11} {row['work']} = {row['tokens']:,} tokens at {row['tokens_per_s']:,} tokens/s "
            f"({row['source']}): {hours(row['hours'])}"
        )
        for note in row["notes"]:
            print(f"  {'':<11} {note}")
    print(f"  left out: {'; '.join(figures['left_out'])}")
    print(
        f"epoch (play@N + train@N): {hours(figures['epoch_hours'])}; "
        f"with evaluate@N's games: {hours(figures['with_evaluation_hours'])}"
    )


def check_json_out(path: Path) -> None:
    """``--json`` may name a new file or an earlier one of this script's, never another file (the check's
    JSON among them): EstimateError or spag's OutputRefused, one line, otherwise."""
    from spag.harness.rule import check_output_file

    if not owned_or_new(path, "estimate", OUTPUT_MARK):
        raise EstimateError(
            f"--json {path}: something is there that is not this script's figures; not replaced"
        )
    check_output_file(path, "--json", replace="any")


def shown(path: Path) -> str:
    """``path`` as the repository names it, where it lies in it."""
    path = path.resolve()
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("check", type=Path, help="bench/gpu.py's JSON")
    parser.add_argument("--params", type=Path, default=ROOT / "configs" / "paper.yaml")
    parser.add_argument(
        "--override",
        type=Path,
        action="append",
        help="override files, in order (default: configs/one-gpu.yaml)",
    )
    for key, value in ASSUMED.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from spag.config import load_settings
    from spag.runtime.atomic import write_json_atomic
    from spag.runtime.errors import DataError, ParamsError

    args = parse_args(argv)
    overrides = args.override if args.override is not None else [ROOT / "configs" / "one-gpu.yaml"]
    assumed = {key: getattr(args, key) for key in ASSUMED}
    try:
        for key, value in assumed.items():
            if not value > 0:
                raise EstimateError(f"--{key.replace('_', '-')}: must be above 0, not {value}")
        try:
            check = json.loads(args.check.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EstimateError(f"{args.check}: not a GPU check's JSON ({exc})") from None
        if not isinstance(check, dict) or check.get("check") != "bench/gpu.py":
            raise EstimateError(f'{args.check}: not a GPU check\'s JSON (no "check": "bench/gpu.py")')
        if args.json:
            check_json_out(args.json)
        settings = load_settings(args.params, overrides)
        figures = estimate(settings, check, assumed)
        preset = " + ".join(shown(p) for p in [args.params, *overrides])
        report(figures, preset)
        if args.json:
            write_json_atomic(args.json, {"estimate": OUTPUT_MARK, "preset": preset, **figures})
            print(f"figures written to {args.json}")
    except (EstimateError, ParamsError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
