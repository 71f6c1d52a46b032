"""Stage `report`: per SPAG epoch, the score against the imitation model (95% interval), win and foul rates,
self-play statistics and benchmark scores: metrics/report.json, the plot CSVs and learning_curves.png."""

from common import METRICS, params

from spag.console import summary
from spag.report import write_report

p = params()
epochs = sorted(int(e) for e in p["spag"]["epochs"])
report = write_report(METRICS, epochs)

print("epoch  score vs imitation  95% interval      games  attacker foul  self-play decisive  foul")
for epoch, entry in report["epochs"].items():
    s = entry.get("score_vs_imitation")
    sp = entry.get("selfplay", {})
    foul = entry.get("foul_rate", {}).get("attacker", {}).get("value", float("nan"))
    if s:
        print(f"{epoch:>5}  {s['value']:>18.3f}  [{s['low']:.3f}, {s['high']:.3f}]  {s['games']:>7}  {foul:>13.2f}"
              f"  {sp.get('decisive_rate', float('nan')):>18.2f}  {sp.get('foul_rate', float('nan')):.2f}")
final = report.get("final", {}).get("score_vs_imitation")
summary("report", f"{len(epochs)} epochs; final score vs imitation "
        + (f"{final['value']:.3f} [{final['low']:.3f}, {final['high']:.3f}] over {final['games']} games"
           if final else "not measured"))
