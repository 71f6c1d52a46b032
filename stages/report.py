"""Stage `report`: per SPAG epoch, the trained model's win rate against the imitation model (95% interval),
and benchmark scores, as one JSON for `dvc metrics` and two CSVs for `dvc plots`."""

import csv
import json

from common import METRICS, params

from spag.console import summary
from spag.io import atomic_path, write_json_atomic


def read(path):
    return json.loads(path.read_text()) if path.exists() else None


p = params()
epochs = sorted(int(e) for e in p["spag"]["epochs"])
report = {"epochs": []}
win_rows, bench_rows = [], []
baseline = read(METRICS / "imitation" / "benchmark.json")
if baseline:
    report["imitation_benchmark"] = baseline["geometric_mean"]
    bench_rows += [{"epoch": 0, "task": t, "score": r["score"]} for t, r in baseline["tasks"].items()]
    bench_rows.append({"epoch": 0, "task": "geometric_mean", "score": baseline["geometric_mean"]})

print("epoch  role      win rate vs imitation  95% interval     games")
for epoch in epochs:
    games = read(METRICS / "epochs" / str(epoch) / "games.json")
    bench = read(METRICS / "epochs" / str(epoch) / "benchmark.json")
    entry = {"epoch": epoch}
    if games:
        vs = games["vs_imitation"]
        for role in ("attacker", "defender", "overall"):
            r = vs[role]
            entry[role] = {k: r[k] for k in ("win_rate", "win_rate_low", "win_rate_high", "games")}
            win_rows.append({"epoch": epoch, "role": role, "win_rate": r["win_rate"],
                             "low": r["win_rate_low"], "high": r["win_rate_high"], "games": r["games"]})
            print(f"{epoch:>5}  {role:<8}  {r['win_rate']:>21.3f}  [{r['win_rate_low']:.3f}, "
                  f"{r['win_rate_high']:.3f}]  {r['games']:>6}")
    if bench:
        entry["benchmark"] = bench["geometric_mean"]
        bench_rows += [{"epoch": epoch, "task": t, "score": r["score"]} for t, r in bench["tasks"].items()]
        bench_rows.append({"epoch": epoch, "task": "geometric_mean", "score": bench["geometric_mean"]})
    report["epochs"].append(entry)


def write_csv(path, rows, columns):
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


write_json_atomic(METRICS / "report.json", report)
write_csv(METRICS / "win_rate.csv", win_rows, ["epoch", "role", "win_rate", "low", "high", "games"])
write_csv(METRICS / "benchmark.csv", bench_rows, ["epoch", "task", "score"])
last = report["epochs"][-1] if report["epochs"] else {}
summary("report", f"{len(epochs)} epochs; last epoch win rate vs imitation "
        f"{last.get('overall', {}).get('win_rate', float('nan')):.3f}")
