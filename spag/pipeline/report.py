"""The run's report: per SPAG epoch, how the model fares against the imitation model and in self-play.

Reads what the stages wrote under ``metrics/`` (``epochs/N/games.json`` from ``evaluate@N``,
``epochs/N/selfplay.json`` from ``play@N``, ``epochs/N/benchmark.json``, ``imitation/benchmark.json``)
and writes:

- ``summary.json``, the headline that ``dvc metrics show`` and ``dvc exp show`` print (:func:`headline`):
  per epoch the score against the imitation model with its 95% interval and the number of games behind it,
  the score minus the strongest baseline's, the benchmark accuracy minus imitation's in points and (Kuhn
  poker) the exact exploitability;
- ``details.json`` (:func:`details`, ``dvc metrics show metrics/details.json``): those and, per epoch, each
  role's foul rate in the games (Adversarial Taboo: ``attacker_foul``), self-play's decisive and foul rates,
  ``selfplay_collapse`` (the game's figures of how varied self-play was,
  :meth:`spag.game.base.Game.collapse_metrics`: Adversarial Taboo's distinct, empty and truncated reply
  shares and words per reply per role, Kuhn poker's action entropy per information set; drawn in
  ``plots/selfplay_collapse.csv``, the lengths in ``plots/selfplay_lengths.csv``) and the benchmark mean;
- ``report.json``, everything: ``epochs.N.score_vs_imitation`` = ``{value, low, high, games}`` (mean
  score, win 1 / tie 1/2 / loss or foul 0, 95% bootstrap interval over words), the same for win and foul
  rates per role, the self-play statistics, the benchmark; and ``final``, the last epoch's entry, so
  runs with different numbers of epochs line up;
- under the key ``reasoning`` (:mod:`spag.evaluate.reasoning`): every checkpoint's benchmark items compared,
  paired, with the imitation and the base model's (``details.json``: per epoch ``reasoning.vs_imitation``
  and ``reasoning.vs_base``, the pooled accuracy difference with its interval, McNemar p-value and
  minimum detectable effect);
- long-format CSVs under ``plots/`` (``epoch, series, value, low, high``), one series per role, rate or
  task, drawn by the ``interval`` template (``.dvc/plots/interval.json``: a line per series with its 95%
  band) in ``dvc plots show`` / ``dvc plots diff``;
- Kuhn poker: under the key ``exploitability``, one row per checkpoint (base, imitation, epoch 1..N:
  ``{checkpoint, step, exact, played, exact_mass_mean, exact_mass_min, played_broken_share}``, ``step`` -1
  for the base model, 0 for imitation, N for epoch N) of the chips exploitability each evaluation stage
  wrote (``exploitability.json``, :mod:`spag.evaluate.strategy`), exact and as played, with how far to
  trust each; each epoch's entry (and ``details.json``'s) has its own as ``exploitability``; drawn in
  ``plots/exploitability.csv`` (``epoch`` is the step);
- Kuhn poker, beside the model's curve: ``references`` (the report stage's, ``report.json``'s
  ``exploitability_references``): the tabular twin of the run's own loop from the model's start, its mean
  over seeds with a 95% t interval (:mod:`spag.train.twin`), and CFR from the uniform profile, an iteration
  an epoch (:mod:`spag.game.kuhn.cfr`), drawn in the same panel;
- ``learning_curves.png``, the same curves drawn with matplotlib, readable without a browser or network
  (``dvc plots show`` loads its JavaScript from a CDN).
"""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

from spag.evaluate import reasoning
from spag.evaluate.games import strongest
from spag.runtime.atomic import atomic_path, write_json_atomic
from spag.runtime.statistics import paired_difference

PLOT_COLUMNS = ["epoch", "series", "value", "low", "high"]
SELFPLAY_RATES = {"decisive_rate": "decisive", "foul_rate": "foul"}  # and each role's win rate
SELFPLAY_LENGTHS = {"mean_turns": "utterances per game", "mean_reply_tokens": "tokens per reply"}
# Which plot draws each group of a game's collapse figures (``counts`` are their denominators: not drawn).
COLLAPSE_PLOTS = {
    "shares": "selfplay_collapse",
    "entropy_bits": "selfplay_collapse",
    "lengths": "selfplay_lengths",
}
# The series of plots/exploitability.csv: the curve's columns (spag.evaluate.strategy's figures).
EXPLOITABILITY_SERIES = {
    "exact": "exact (chips)",
    "played": "played (chips)",
    "exact_mass_mean": "exact: mass on the canonical replies",
}


def _read(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _entry(point: dict) -> dict:
    return {k: point[k] for k in ("value", "low", "high", "games")}


def _by_role(boot: dict, kind: str) -> dict[str, dict]:
    """``{role: entry}`` of the bootstrap entries ``ROLE_<kind>_rate`` (kind: win, foul, opponent_foul), in
    the games' role order; a role's own foul rate is not its opponent's."""
    suffix = f"_{kind}_rate"
    return {
        key[: -len(suffix)]: _entry(point)
        for key, point in boot.items()
        if key.endswith(suffix) and not (kind == "foul" and key.endswith("_opponent_foul_rate"))
    }


def _baselines(metrics: Path) -> dict[str, dict]:
    """``metrics/baselines/NAME.json`` of the baselines stage, by name."""
    folder = metrics / "baselines"
    return {p.stem: _read(p) for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}


def baseline_comparison(games: dict, baselines: dict[str, dict]) -> dict:
    """The epoch's score against the imitation model minus each baseline's on the same words and seeds,
    paired per word (negative: the baseline does better), and which baseline is the strongest."""
    mine = {w: tuple(v) for w, v in games["per_word"].items()}
    out: dict = {"differences": {}}
    for name, result in baselines.items():
        theirs = {w: tuple(v) for w, v in result["games"]["per_word"].items()}
        out["differences"][name] = _entry(paired_difference(mine, theirs))
        out["differences"][name]["baseline_score"] = result["games"]["bootstrap"]["score"]["value"]
    best = strongest({name: r["games"] for name, r in baselines.items()})
    if best is not None:
        out["strongest"] = best
        out["vs_strongest"] = out["differences"][best]
    return out


def exploitability_point(folder: Path) -> dict | None:
    """A checkpoint's chips exploitability, exact and as played, from the ``exploitability.json`` its
    evaluation stage wrote in ``folder`` (None: none there, or another game's note)."""
    figures = _read(folder / "exploitability.json")
    if not figures or "exact" not in figures:
        return None
    exact, played = figures["exact"], figures["played"]
    return {
        "exact": exact["chips"]["exploitability"],
        "played": played["chips"]["exploitability"],
        "exact_mass_mean": exact["mass_mean"],
        "exact_mass_min": exact["mass_min"],
        "played_broken_share": played["broken_share"],
        "played_replies": played["replies"],
    }


def exploitability_curve(metrics: Path, epochs: list[int]) -> list[dict]:
    """Kuhn poker: one row per checkpoint that has its strategy's figures, in order (base: step -1,
    imitation: 0, epoch N: N)."""
    where = [("base", -1, metrics / "base"), ("imitation", 0, metrics / "imitation")]
    where += [(f"epoch_{e}", e, metrics / "epochs" / str(e)) for e in epochs]
    return [
        {"checkpoint": name, "step": step, **point}
        for name, step, folder in where
        if (point := exploitability_point(folder)) is not None
    ]


def epoch_entry(metrics: Path, epoch: int) -> dict:
    """Everything the report says about one epoch (empty parts left out)."""
    folder = metrics / "epochs" / str(epoch)
    entry: dict = {}
    games = _read(folder / "games.json")
    if games and "bootstrap" in games.get("vs_imitation", {}):
        boot = games["vs_imitation"]["bootstrap"]
        entry["score_vs_imitation"] = _entry(boot["score"])
        entry["win_rate"] = _by_role(boot, "win")
        entry["foul_rate"] = _by_role(boot, "foul")
        entry["opponent_foul_rate"] = _by_role(boot, "opponent_foul")
        entry["decomposition"] = {
            role: {part: _entry(point) for part, point in parts.items()}
            for role, parts in boot["decomposition"].items()
        }
        baselines = _baselines(metrics)
        if baselines and "per_word" in games["vs_imitation"]:
            entry["vs_baselines"] = baseline_comparison(games["vs_imitation"], baselines)
    if games and "vs_baseline" in games:
        entry["score_vs_baseline"] = _entry(games["vs_baseline"]["bootstrap"]["score"])
        entry["score_vs_baseline"]["opponent"] = games["vs_baseline"]["opponent"]
    skill = _read(folder / "skill.json")
    if skill and "vs_imitation" in skill:  # the game's skill metrics (Adversarial Taboo: clue and guess rank)
        entry["skill"] = {
            metric: {
                **_entry({**skill[metric], "games": skill[metric].get("lines", skill[metric].get("games"))}),
                "vs_imitation": _entry(skill["vs_imitation"][metric]),
            }
            for metric in skill["vs_imitation"]
        }
        if "candidates" in skill:
            entry["skill"]["candidates"] = skill["candidates"]
    selfplay = _read(folder / "selfplay.json")
    if selfplay:
        entry["selfplay"] = {k: v for k, v in selfplay.items() if k not in ("run", "epoch")}
    exploitability = exploitability_point(folder)
    if exploitability is not None:  # Kuhn poker: the epoch's strategy (spag.evaluate.strategy)
        entry["exploitability"] = exploitability
    bench = _read(folder / "benchmark.json")
    if reasoning.measured(bench):
        entry["benchmark"] = {
            "geometric_mean": bench["geometric_mean"],
            **{task: r["score"] for task, r in bench["tasks"].items()},
        }
    return entry


def build_report(metrics: Path, epochs: list[int], references: dict | None = None) -> dict:
    report: dict = {"epochs": {str(e): epoch_entry(metrics, e) for e in epochs}}
    report["reasoning"] = reasoning.reasoning_report(metrics, epochs)
    curve = exploitability_curve(metrics, epochs)
    if curve:
        report["exploitability"] = curve
        if references:
            report["exploitability_references"] = references
    baseline = _read(metrics / "imitation" / "benchmark.json")
    if baseline:
        report["imitation_benchmark"] = {
            "geometric_mean": baseline["geometric_mean"],
            **{t: r["score"] for t, r in baseline["tasks"].items()},
        }
    if epochs:
        report["final"] = {"epoch": epochs[-1], **report["epochs"][str(epochs[-1])]}
    return report


def headline(report: dict) -> dict:
    """The few numbers per epoch a reader looks at first (``summary.json``, what ``dvc metrics show`` prints
    on a terminal's width): the score against the imitation model with its interval and games, the score
    minus the strongest baseline's (``vs_baseline``), the benchmark accuracy minus the imitation model's in
    points (``reasoning``) and, in Kuhn poker, the exact exploitability. Everything else per epoch:
    :func:`details` (``details.json``)."""
    out: dict = {}
    for epoch, line in details(report).items():
        short = {k: line[k] for k in ("score", "score_low", "score_high", "games") if k in line}
        if "vs_strongest_baseline" in line:
            short["vs_baseline"] = line["vs_strongest_baseline"]["value"]
        if "vs_imitation" in line.get("reasoning", {}):
            short["reasoning"] = round(100 * line["reasoning"]["vs_imitation"]["delta"], 2)
        if "exploitability" in line:
            short["exploitability"] = line["exploitability"]["exact"]
        out[epoch] = short
    return out


def details(report: dict) -> dict:
    """Every epoch's figures beyond the headline (``details.json``: ``dvc metrics show metrics/details.json``),
    flat enough for a column each: ``{"1": {"score": ..., "outcomes": ..., "skill": ..., ...}, ...}``."""
    out: dict = {}
    for epoch, entry in report["epochs"].items():
        line: dict = {}
        if "score_vs_imitation" in entry:
            score = entry["score_vs_imitation"]
            line.update(
                score=score["value"],
                score_low=score["low"],
                score_high=score["high"],
                games=score["games"],
                **{f"{role}_foul": point["value"] for role, point in entry["foul_rate"].items()},
            )
        if "decomposition" in entry:  # how the games ended, per role, with intervals
            line["outcomes"] = {
                role: {part: _point(point) for part, point in parts.items()}
                for role, parts in entry["decomposition"].items()
            }
        if "skill" in entry:  # ranks among the evaluation words, lower is better; delta = minus imitation's
            line["skill"] = {
                metric: {
                    "value": point["value"],
                    **{
                        f"delta{suffix}": point["vs_imitation"][key]
                        for suffix, key in (("", "value"), ("_low", "low"), ("_high", "high"))
                    },
                }
                for metric, point in entry["skill"].items()
                if isinstance(point, dict)
            }
        if "vs_baselines" in entry and "vs_strongest" in entry["vs_baselines"]:
            line["vs_strongest_baseline"] = _point(entry["vs_baselines"]["vs_strongest"])
        if "score_vs_baseline" in entry:
            line["score_vs_baseline"] = _point(entry["score_vs_baseline"])
        if "selfplay" in entry:
            line.update(
                selfplay_decisive=entry["selfplay"]["decisive_rate"],
                selfplay_foul=entry["selfplay"]["foul_rate"],
            )
            collapse = {
                group: figures
                for group, figures in entry["selfplay"].get("collapse", {}).items()
                if group in COLLAPSE_PLOTS
            }
            if collapse:
                line["selfplay_collapse"] = collapse
        if "benchmark" in entry:
            line["benchmark"] = entry["benchmark"]["geometric_mean"]
        if "exploitability" in entry:  # Kuhn poker: chips a hand, exact and as played
            point = entry["exploitability"]
            line["exploitability"] = {
                "exact": point["exact"],
                "played": point["played"],
                "exact_mass": point["exact_mass_mean"],
            }
        line.update(_reasoning_headline(report, epoch))
        out[epoch] = line
    return out


def _point(entry: dict) -> dict:
    return {"value": entry["value"], "low": entry["low"], "high": entry["high"]}


def _reasoning_headline(report: dict, epoch: str) -> dict:
    """``{"reasoning": {"vs_imitation": ..., "vs_base": ...}}`` for one epoch (spag.evaluate.reasoning)."""
    line = reasoning.headline(report.get("reasoning", {}).get("epochs", {}).get(epoch))
    return {"reasoning": line} if line else {}


def plot_rows(report: dict) -> dict[str, list[dict]]:
    """The long-format rows of each plot CSV, by file stem."""

    def row(epoch, series, value, low=None, high=None):
        return {
            "epoch": epoch,
            "series": series,
            "value": value,
            "low": value if low is None else low,
            "high": value if high is None else high,
        }

    plots: dict[str, list[dict]] = {
        "vs_imitation": [],
        "selfplay_rates": [],
        "selfplay_lengths": [],
        "selfplay_collapse": [],
        "benchmark": [],
    }
    if "imitation_benchmark" in report:
        plots["benchmark"] += [row(0, task, v) for task, v in report["imitation_benchmark"].items()]
    for epoch, entry in ((int(e), x) for e, x in report["epochs"].items()):
        if "score_vs_imitation" in entry:
            s = entry["score_vs_imitation"]
            plots["vs_imitation"].append(row(epoch, "score", s["value"], s["low"], s["high"]))
            for kind in ("win", "foul"):
                for role, point in entry[f"{kind}_rate"].items():
                    plots["vs_imitation"].append(
                        row(epoch, f"{role} {kind}", point["value"], point["low"], point["high"])
                    )
        if "selfplay" in entry:
            sp = entry["selfplay"]
            rates = {
                **SELFPLAY_RATES,
                **{key: key.removesuffix("_win_rate") + " win" for key in sp if key.endswith("_win_rate")},
            }
            for key, name in rates.items():
                plots["selfplay_rates"].append(row(epoch, name, sp[key], sp[f"{key}_low"], sp[f"{key}_high"]))
            if sp.get("truncated_share") is not None:
                plots["selfplay_rates"].append(row(epoch, "truncated replies", sp["truncated_share"]))
            for key, name in SELFPLAY_LENGTHS.items():
                if sp.get(key) is not None:
                    plots["selfplay_lengths"].append(row(epoch, name, sp[key]))
            for group, figures in sp.get("collapse", {}).items():
                if group in COLLAPSE_PLOTS:
                    plots[COLLAPSE_PLOTS[group]] += [
                        row(epoch, name.replace("_", " "), value)
                        for name, value in figures.items()
                        if value is not None
                    ]
        if "benchmark" in entry:
            plots["benchmark"] += [row(epoch, task, v) for task, v in entry["benchmark"].items()]
    plots["reasoning"] = _reasoning_plot_rows(report)
    plots["exploitability"] = [
        row(point["step"], name, point[key])
        for point in report.get("exploitability", [])
        for key, name in EXPLOITABILITY_SERIES.items()
    ]
    for series, points in report.get("exploitability_references", {}).items():
        plots["exploitability"] += [
            row(p["step"], series, p["value"], p.get("low"), p.get("high")) for p in points
        ]
    return plots


def _reasoning_plot_rows(report: dict) -> list[dict]:
    return reasoning.plot_rows(report.get("reasoning", {}))


def write_csv(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=PLOT_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


TITLES = {
    "vs_imitation": "Against the imitation model (held-out words)",
    "selfplay_rates": "Self-play outcomes",
    "selfplay_lengths": "Self-play lengths",
    "selfplay_collapse": "Self-play variety (shares of replies; entropy in bits)",
    "benchmark": "Reasoning benchmark (epoch 0 = imitation)",
    "reasoning": "Reasoning: pooled accuracy B - A, paired (epoch 0 = imitation vs base)",
    "exploitability": "Kuhn poker: exploitability (epoch -1 = base, 0 = imitation), beside the twin and CFR",
}
# What each panel's y axis measures (a panel draws one unit; Kuhn poker's mass goes on a second axis).
Y_LABELS = {
    "vs_imitation": "score, win or foul rate",
    "selfplay_rates": "rate",
    "selfplay_lengths": "tokens or words per reply",
    "selfplay_collapse": "share of replies, or entropy in bits",
    "benchmark": "accuracy",
    "reasoning": "accuracy difference",
    "exploitability": "chips a hand",
}
SECOND_AXIS = {
    "exploitability": (EXPLOITABILITY_SERIES["exact_mass_mean"], "mass on the canonical replies", (0, 1.05)),
    "selfplay_lengths": (SELFPLAY_LENGTHS["mean_turns"], SELFPLAY_LENGTHS["mean_turns"], None),
}
# Panels drawn only when they have rows (another game has no strategy).
OPTIONAL_PANELS = ("exploitability",)
ZERO_LINES = {"vs_imitation": 0.5, "reasoning": 0.0, "exploitability": 0.0}


def _draw_series(ax, rows: list[dict], series: str, **style):
    mine = sorted((r for r in rows if r["series"] == series), key=lambda r: r["epoch"])
    x = [r["epoch"] for r in mine]
    (line,) = ax.plot(x, [r["value"] for r in mine], marker="o", label=series, **style)
    ax.fill_between(
        x, [r["low"] for r in mine], [r["high"] for r in mine], alpha=0.15, color=line.get_color()
    )
    return line


def _draw_panel(ax, stem: str, rows: list[dict]) -> None:
    """One panel: a line per series with its 95% band; a series of :data:`SECOND_AXIS` on a right-hand axis of
    its own; an empty panel says so."""
    second, label, limits = SECOND_AXIS.get(stem, (None, None, None))
    lines = [
        _draw_series(ax, rows, series)
        for series in dict.fromkeys(r["series"] for r in rows)
        if series != second
    ]
    if any(r["series"] == second for r in rows):
        right = ax.twinx()
        lines.append(_draw_series(right, rows, second, linestyle="--", color="grey"))
        right.set_ylabel(label)
        if limits:
            right.set_ylim(*limits)
    if stem in ZERO_LINES:
        ax.axhline(ZERO_LINES[stem], color="grey", linestyle=":", linewidth=1)
    ax.set_title("\n".join(textwrap.wrap(TITLES[stem], 48)), fontsize="medium")
    ax.set_xlabel("epoch")
    ax.set_ylabel(Y_LABELS[stem])
    epochs = sorted({r["epoch"] for r in rows})
    if epochs:
        ax.set_xticks(epochs)
        ax.legend(handles=lines, fontsize="small")
    else:
        ax.text(
            0.5,
            0.5,
            "not measured in this run",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="grey",
        )
        ax.set_xticks([])


def draw_png(plots: dict[str, list[dict]], path: Path) -> None:
    """The learning curves as one PNG: a panel per plot, a line per series, the 95% band shaded."""
    plots = {stem: rows for stem, rows in plots.items() if rows or stem not in OPTIONAL_PANELS}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = (len(plots) + 1) // 2
    fig, axes = plt.subplots(2, columns, figsize=(6 * columns, 9))
    for ax, (stem, rows) in zip(axes.flat, plots.items()):
        _draw_panel(ax, stem, rows)
    for ax in list(axes.flat)[len(plots) :]:
        ax.axis("off")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def write_report(metrics: Path, epochs: list[int], references: dict | None = None) -> dict:
    """Write summary.json, report.json, the plot CSVs and learning_curves.png under ``metrics`` (the report
    stage's outputs: replaced whatever is there, as DVC would); return the report. ``references``: Kuhn
    poker's curves to draw beside the model's exploitability, ``{series: [{step, value, low, high}]}``."""
    report = build_report(metrics, epochs, references)
    write_json_atomic(metrics / "report.json", report)
    write_json_atomic(metrics / "summary.json", headline(report))
    write_json_atomic(metrics / "details.json", details(report))
    plots = plot_rows(report)
    for stem, rows in plots.items():
        write_csv(metrics / "plots" / f"{stem}.csv", rows)
    draw_png(plots, metrics / "learning_curves.png")
    return report
