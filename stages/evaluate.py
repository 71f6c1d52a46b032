"""Stage `evaluate@N` (and `evaluate_imitation`): game win rates and the reasoning benchmark.

`python stages/evaluate.py imitation` benchmarks the imitation model (the baseline for `spag compare`).
`python stages/evaluate.py N` pits epoch N against the imitation model (and, with `evaluate.vs_previous`,
against epoch N-1) on held-out words, both roles each, `evaluate.seeds` games per word and role, and
benchmarks it.
"""

import sys

from common import (DATA, METRICS, WORDS, epoch_dir, model_dir, params, play_config, player_options,
                    previous_model, sample_words)

from spag.console import summary
from spag.evaluate.benchmark import run_benchmark
from spag.io import write_json_atomic

p = params()
which = sys.argv[1] if len(sys.argv) == 2 else sys.exit("usage: python stages/evaluate.py imitation|EPOCH")
bench = p["evaluate"]["benchmark"]


def benchmark(model, metrics_dir, samples):
    return run_benchmark(str(model), tasks=bench["tasks"], suite=bench["suite"], limit=bench["limit"],
                         output=metrics_dir / "benchmark.json", samples_out=samples, seed=p["seed"])


if which == "imitation":
    scores = benchmark(model_dir("imitation"), METRICS / "imitation", DATA / "imitation" / "benchmark.samples.jsonl")
    summary("evaluate_imitation", f"benchmark geometric mean {scores['geometric_mean']:.3f}")
    sys.exit(0)

from spag.evaluate.games import evaluate_models  # noqa: E402
from spag.partial import resumable_output  # noqa: E402
from spag.players import load_player  # noqa: E402

cfg = p["evaluate"]
# Evaluation words and sampling seeds come from evaluate.seed alone: the same for every epoch, every
# training seed and every experiment, so all comparisons are paired.
words = sample_words(WORDS / "eval.txt", cfg["words"], seed=f"evaluate-{cfg['seed']}")
config = play_config(p, "evaluate", seed=cfg["seed"])
if cfg.get("temperature") is None:
    config.temperature = p["play"]["temperature"]
model = model_dir(f"epoch_{which}")
out = epoch_dir(which) / "eval_episodes"
opponents = {"vs_imitation": model_dir("imitation")}
if cfg["vs_previous"] and previous_model(p, which) != model_dir("imitation"):
    opponents["vs_previous"] = previous_model(p, which)
player = load_player(str(model), "hf", **player_options(cfg))  # loaded once for every match
# Episodes go to a work folder beside the declared output, which DVC does not delete: a killed stage
# continues from its finished games on the next `dvc repro` (see spag.partial).
with resumable_output(out, "evaluate") as work:
    games = {name: evaluate_models(player, load_player(str(opponent), "hf", **player_options(cfg)), words, config,
                                   episodes_out=work / name, resume=True, seeds=cfg["seeds"])
             for name, opponent in opponents.items()}
write_json_atomic(METRICS / "epochs" / which / "games.json", games)
scores = benchmark(model, METRICS / "epochs" / which, epoch_dir(which) / "benchmark.samples.jsonl")
rates = "; ".join(
    f"{name}: score {g['bootstrap']['score']['value']:.3f} [{g['bootstrap']['score']['low']:.3f}, "
    f"{g['bootstrap']['score']['high']:.3f}] over {g['games']} games, attacker foul rate "
    f"{g['bootstrap']['attacker_foul_rate']['value']:.2f}" for name, g in games.items())
summary(f"evaluate@{which}", f"{rates}; benchmark geometric mean {scores['geometric_mean']:.3f}")
