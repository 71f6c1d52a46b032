"""Stage `evaluate@N` (and `evaluate_imitation`): game win rates and the reasoning benchmark.

`python stages/evaluate.py imitation` benchmarks the imitation model (the baseline for `spag compare`).
`python stages/evaluate.py N` pits epoch N against the imitation model and against epoch N-1 on held-out
words, both roles each, and benchmarks it.
"""

import sys

from common import DATA, METRICS, WORDS, epoch_dir, model_dir, params, previous_model

from spag.evaluate.benchmark import run_benchmark
from spag.io import write_json_atomic
from spag.words import read_words

p = params()
which = sys.argv[1] if len(sys.argv) == 2 else sys.exit("usage: python stages/evaluate.py imitation|EPOCH")
bench = p["evaluate"]["benchmark"]


def benchmark(model, metrics_dir, samples):
    run_benchmark(str(model), tasks=bench["tasks"], suite=bench["suite"], limit=bench["limit"],
                  output=metrics_dir / "benchmark.json", samples_out=samples, seed=p["seed"])


if which == "imitation":
    benchmark(model_dir("imitation"), METRICS / "imitation", DATA / "imitation" / "benchmark.samples.jsonl")
    sys.exit(0)

from spag.evaluate.games import evaluate_models  # noqa: E402
from spag.play import PlayConfig  # noqa: E402

cfg = p["evaluate"]
config = PlayConfig(max_turns=p["game"]["max_turns"], temperature=cfg["temperature"],
                    max_new_tokens=cfg["max_new_tokens"], seed=p["seed"])
words = read_words(WORDS / "eval.txt")[: cfg["words"]]
model = model_dir(f"epoch_{which}")
out = epoch_dir(which) / "eval_episodes"
opponents = {"vs_imitation": model_dir("imitation")}
if previous_model(p, which) != model_dir("imitation"):
    opponents["vs_previous"] = previous_model(p, which)
games = {name: evaluate_models(model, opponent, words, config, episodes_out=out / name)
         for name, opponent in opponents.items()}
write_json_atomic(METRICS / "epochs" / which / "games.json", games)
benchmark(model, METRICS / "epochs" / which, epoch_dir(which) / "benchmark.samples.jsonl")
