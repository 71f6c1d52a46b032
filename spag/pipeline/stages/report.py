"""Stage ``report``: per epoch: score, outcomes, skill, win and foul rates with 95% intervals; reasoning
against imitation and base; Kuhn poker: exploitability per checkpoint; learning curves.

Its params, data and outputs are declared once, in :mod:`spag.pipeline.table`.
"""

from __future__ import annotations

import json
from pathlib import Path

from spag.config import Settings
from spag.evaluate.reasoning import headline
from spag.evaluate.strategy import ROWS
from spag.game.kuhn import KuhnPoker
from spag.game.kuhn.cfr import cfr_curve
from spag.game.kuhn.exploitability import constant, exploitability
from spag.game.registry import game_class
from spag.pipeline.context import Layout
from spag.pipeline.report import write_report
from spag.runtime.console import summary

TWIN, CFR = "twin (chips, mean of seeds)", "CFR from uniform (an iteration an epoch)"


def report(settings: Settings, layout: Layout) -> None:
    """Per SPAG epoch: the score against the imitation model (95% interval), win and foul rates, self-play
    statistics and benchmark scores (Kuhn poker: the exploitability of every checkpoint, base and imitation
    included, beside the tabular twin of the run's loop and CFR): metrics/report.json, the plot CSVs and
    learning_curves.png."""
    epochs = sorted(int(e) for e in settings.spag.epochs)
    game = game_class(settings.game.name)
    result = write_report(layout.metrics, epochs, exploitability_references(settings, layout.metrics))
    print("epoch  score vs imitation  95% interval      games  own fouls  self-play decisive  foul")
    for epoch, entry in result["epochs"].items():
        s = entry.get("score_vs_imitation")
        sp = entry.get("selfplay", {})
        fouls = sum(point["value"] for point in entry.get("foul_rate", {}).values())
        if s:
            print(
                f"{epoch:>5}  {s['value']:>18.3f}  [{s['low']:.3f}, {s['high']:.3f}]  {s['games']:>7}  {fouls:>9.2f}"
                f"  {sp.get('decisive_rate', float('nan')):>18.2f}  {sp.get('foul_rate', float('nan')):.2f}"
            )
    # Wins by the model's own play in each role (Adversarial Taboo: an induced word, a correct guess).
    own = [
        (role, part)
        for role in game.roles
        for cause, part in game.parts[role].items()
        if cause in game.skill_causes and part.startswith("win")
    ]
    print(
        "epoch  "
        + "  ".join(f"{role} {part}" for role, part in own)
        + "  skill deltas [95%]  vs strongest baseline [95%]"
    )
    for epoch, entry in result["epochs"].items():
        parts = entry.get("decomposition")
        if not parts:
            continue
        skill = entry.get("skill", {})
        deltas = ", ".join(
            f"{m} {_delta_text(v.get('vs_imitation'))}"
            for m, v in skill.items()
            if isinstance(v, dict) and "vs_imitation" in v
        )
        base = entry.get("vs_baselines", {}).get("vs_strongest")
        versus = (
            (
                f"{base['value']:+.3f} [{base['low']:+.3f}, {base['high']:+.3f}] "
                f"{entry['vs_baselines']['strongest']}"
            )
            if base
            else ""
        )
        print(
            f"{epoch:>5}  "
            + "  ".join(f"{parts[role][part]['value']:>{len(role) + len(part) + 1}.3f}" for role, part in own)
            + f"  {deltas}  {versus}"
        )
    _print_reasoning(result.get("reasoning", {}))
    _print_exploitability(result.get("exploitability", []))
    final = result.get("final", {}).get("score_vs_imitation")
    summary(
        "report",
        f"{len(epochs)} epochs; final score vs imitation "
        + (
            f"{final['value']:.3f} [{final['low']:.3f}, {final['high']:.3f}] over {final['games']} games"
            if final
            else "not measured"
        ),
    )


def exploitability_references(settings: Settings, metrics: Path) -> dict | None:
    """Kuhn poker: the curves the model's exploitability is drawn beside (None for another game, or before
    the start's strategy is read). The tabular twin of this run's loop (:mod:`spag.train.twin`: its hands,
    rewards and training settings, ``twin.seeds`` seeds from ``seed``) from the exact strategy of the
    checkpoint the first epoch starts from, and CFR from the uniform profile, an iteration an epoch; each a
    list of ``{step, value, low, high}`` on the report's steps (-1 base, 0 imitation, N epoch N)."""
    if settings.game.name != KuhnPoker.name:
        return None
    first = settings.spag.epochs[min(settings.spag.epochs, key=int)].previous
    rows = metrics / first / ROWS
    if first not in ("base", "imitation") or not rows.exists():
        return None
    from spag.train.twin import TwinLoop, twin_curves  # torch: only for Kuhn poker

    start = {
        (r["card"], r["history"]): r["probability"]
        for line in rows.read_text(encoding="utf-8").splitlines()
        if (r := json.loads(line))["way"] == "exact"
    }
    offset = -1 if first == "base" else 0
    twin = twin_curves(start, TwinLoop.of(settings), [settings.seed + k for k in range(settings.twin.seeds)])
    cfr = [{"step": offset, "value": exploitability(constant(0.5))}]  # its start, the uniform profile
    cfr += [
        {"step": offset + p["iteration"], "value": p["exploitability"]}
        for p in cfr_curve(len(settings.spag.epochs))
    ]
    return {
        TWIN: [
            {
                "step": offset + p["epoch"],
                "value": p["mean"],
                "low": p["low"] if p["low"] is not None else p["mean"],
                "high": p["high"] if p["high"] is not None else p["mean"],
            }
            for p in twin["curve"]
        ],
        CFR: cfr,
    }


def _delta_text(d: dict | None) -> str:
    return f"{d['value']:+6.2f} [{d['low']:+.2f}, {d['high']:+.2f}]" if d else ""


def _print_reasoning(reasoning: dict) -> None:
    """Per epoch, the pooled benchmark accuracy against each baseline: B - A in points with its interval,
    McNemar's p and the minimum detectable effect (spag.evaluate.reasoning)."""
    rows = [("imitation", "vs_base", headline(reasoning.get("imitation")).get("vs_base"))]
    rows += [
        (epoch, key, line)
        for epoch, entry in reasoning.get("epochs", {}).items()
        for key, line in headline(entry).items()
    ]
    rows = [row for row in rows if row[2]]
    if not rows:
        return
    print("reasoning (pooled accuracy, paired)  B-A points  95% interval        McNemar p    MDE  items")
    for who, key, line in rows:
        p = f"{line['p_mcnemar']:.3g}" if line["p_mcnemar"] is not None else "-"
        mde = f"{100 * line['mde']:.1f}" if line["mde"] is not None else "-"
        print(
            f"{who:>9} {key.replace('_', ' '):<26}  {100 * line['delta']:+10.2f}  [{100 * line['low']:+6.2f}, "
            f"{100 * line['high']:+6.2f}]  {p:>12}  {mde:>5}  {line['items']:>5}"
        )


def _print_exploitability(curve: list[dict]) -> None:
    """Kuhn poker: each checkpoint's chips exploitability, exact (with the mass on the canonical replies)
    and as played (with the share of replies that break the rules)."""
    if not curve:
        return
    print("checkpoint  exploitability (chips): exact  mass mean  mass min  played  broken  replies")
    for point in curve:
        print(
            f"{point['checkpoint']:>10}  {point['exact']:>29.3f}  {point['exact_mass_mean']:>9.2g}  "
            f"{point['exact_mass_min']:>8.2g}  {point['played']:>6.3f}  {point['played_broken_share']:>6.0%}  "
            f"{point['played_replies']:>7}"
        )
