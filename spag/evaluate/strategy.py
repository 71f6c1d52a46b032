"""A model's Kuhn poker strategy, read two ways, and its exact figures (``spag strategy``).

At each of the game's 12 information sets (:data:`spag.game.kuhn.exploitability.INFOSETS`) the model is
given the game's prompt for that state (its own card and the actions so far; the other card is not shown,
so any deal with that card gives the same prompt) and asked, two ways, how often it plays the aggressive
action (``bet``, or ``call`` facing a bet):

- **exact**: the probability that its reply begins with each legal action's canonical reply (the
  teacher's text, ``[bet]``/``[check]`` or ``[call]``/``[fold]``, in its own tokens) under the prompt and the
  chat template at temperature 1, normalised over the two; ``mass`` is what the two hold together (a model
  that answers in sentences puts little there). Where replies name the card first (``game.say_card``),
  it is the probability of each action's reply after the opening ``My card: K.``, given that opening;
- **played**: the replies it samples at the evaluation settings (temperature, top-k, lengths, empty replies
  resampled), each read by the game's parser: the aggressive action's share of the legal replies, with a
  95% Wilson interval, and the shares of replies that play each action or break the rules (no bracketed
  action, or one the state does not allow). With no legal reply at all the probability is 1/2 and its
  interval [0, 1].

Each way's 12 probabilities make a profile whose exploitability and values follow exactly
(:mod:`spag.game.kuhn.exploitability`), in chips and in wins.

``spag strategy`` and the pipeline's evaluation stages (``evaluate_base``, ``evaluate_imitation``,
``evaluate@N``) write the same two files with :func:`write_strategy`: :data:`ROWS` (the rows) and
:data:`FIGURES` (:func:`exploitability_report`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from spag.evaluate.games import wilson_interval
from spag.game.kuhn import CARDS, ROLES, action_of, legal, reply, say
from spag.game.kuhn.exploitability import INFOSETS, InfoSet, all_figures
from spag.play.engine import PlayConfig
from spag.runtime.atomic import write_json_atomic, write_jsonl_atomic
from spag.runtime.errors import DataError
from spag.runtime.records import read_records

WAYS = ("exact", "played")
ROWS, FIGURES = "strategy.jsonl", "exploitability.json"


def state(infoset: InfoSet) -> tuple[str, list[dict]]:
    """A game state ``(deal, history)`` at ``infoset``: a deal that gives the player its card, and the
    canonical utterances of the actions so far."""
    other = next(c for c in CARDS if c != infoset.card)
    deal = f"{infoset.card}-{other}" if infoset.player == ROLES[0] else f"{other}-{infoset.card}"
    actions = infoset.history.split(",") if infoset.history else []
    return deal, [{"role": ROLES[i % 2], "content": reply(a)} for i, a in enumerate(actions)]


def _row(way: str, infoset: InfoSet, probability: float, **extra) -> dict:
    return {
        "way": way,
        "player": infoset.player,
        "card": infoset.card,
        "history": infoset.history,
        "action": infoset.action,
        "probability": probability,
        **extra,
    }


def _check_game(config: PlayConfig) -> None:
    if config.game.name != "kuhn-poker":
        raise ValueError(f"a strategy is read in Kuhn poker, not in {config.game.name}")


def exact_rows(player, config: PlayConfig) -> list[dict]:
    """One ``exact`` row per information set (see the module docstring); ``player`` scores continuations
    (the hf backend's ``continuation_logprobs``), one call for the states of each pair of legal actions."""
    _check_game(config)
    say_card = config.game.settings.say_card
    # one call per pair of legal actions (and, where replies name the card first, per card: its opening)
    calls: dict[tuple[str, str, str], list[int]] = {}
    for n, infoset in enumerate(INFOSETS):
        history = state(infoset)[1]
        passive = next(a for a in legal([action_of(u["content"]) for u in history]) if a != infoset.action)
        opening = say(infoset.card) if say_card else ""
        calls.setdefault((infoset.action, passive, opening), []).append(n)
    scores: dict[int, list[float]] = {}
    for (aggressive, passive, opening), members in calls.items():
        prompts = [config.prompt(INFOSETS[n].player, *state(INFOSETS[n])) for n in members]
        logprobs = player.continuation_logprobs(
            prompts, opening, [reply(aggressive), reply(passive)], lead=" " if opening else ""
        )
        scores.update(zip(members, logprobs.tolist()))
    rows = []
    for n, infoset in enumerate(INFOSETS):
        aggressive_lp, passive_lp = scores[n]
        # p / (p + q) from the log-probabilities: exact however small both are
        probability = 1 / (1 + math.exp(min(passive_lp - aggressive_lp, 700.0)))
        rows.append(
            _row(
                "exact",
                infoset,
                probability,
                mass=math.exp(aggressive_lp) + math.exp(passive_lp),
                logprob=aggressive_lp,
                passive_logprob=passive_lp,
            )
        )
    return rows


def played_rows(player, config: PlayConfig, samples: int, *, show_progress: bool = False) -> list[dict]:
    """One ``played`` row per information set: ``samples`` replies at each, sampled with ``config``'s
    settings and seed (see the module docstring)."""
    _check_game(config)
    if samples < 1:
        raise ValueError(f"samples: {samples} is not a positive number of replies")
    states = [state(i) for i in INFOSETS for _ in range(samples)]
    said = config.next_utterances(player, states, show_progress=show_progress)
    rows = []
    for n, infoset in enumerate(INFOSETS):
        history = states[n * samples][1]
        allowed = legal([action_of(u["content"]) for u in history])
        mine = said[n * samples : (n + 1) * samples]
        plays = [action_of(u["content"]) for u in mine]
        aggressive = sum(a == infoset.action for a in plays)
        passive = sum(a in allowed and a != infoset.action for a in plays)
        broken = samples - aggressive - passive
        legal_replies = aggressive + passive
        low, high = wilson_interval(aggressive, legal_replies)
        rows.append(
            _row(
                "played",
                infoset,
                aggressive / legal_replies if legal_replies else 0.5,
                low=low,
                high=high,
                replies=samples,
                legal_replies=legal_replies,
                aggressive_share=aggressive / samples,
                passive_share=passive / samples,
                broken_share=broken / samples,
                truncated_share=sum(bool(u.get("truncated")) for u in mine) / samples,
            )
        )
    return rows


def profile_of(rows: Sequence[dict], way: str) -> dict[tuple[str, str], float]:
    """The profile ``{(card, history): probability}`` of one way's rows."""
    return {(r["card"], r["history"]): float(r["probability"]) for r in rows if r["way"] == way}


def strategy_of(
    player, settings: PlayConfig, samples: int = 100, seed: int | None = None, *, show_progress: bool = False
) -> tuple[list[dict], dict]:
    """``(rows, figures)`` of ``player``'s strategy in the Kuhn poker game of ``settings`` (its prompts and
    evaluation sampling; ``seed``: the sampling's, default the settings'): the ``exact`` rows then the
    ``played`` ones (``samples`` replies per information set), and ``{way: {"chips": ..., "wins": ...}}``
    with each way's exact figures (:func:`spag.game.kuhn.exploitability.figures`)."""
    config = settings if seed is None else replace(settings, seed=seed)
    rows = exact_rows(player, config) + played_rows(player, config, samples, show_progress=show_progress)
    return rows, {way: all_figures(profile_of(rows, way)) for way in WAYS}


def exploitability_report(rows: Sequence[dict], figures: dict) -> dict:
    """``exploitability.json``: each way's figures in chips and wins, with what says how far to trust it (the
    exact way's mass on the canonical replies, the played way's rule breaks); without played rows, the exact
    way alone."""
    exact = [r for r in rows if r["way"] == "exact"]
    played = [r for r in rows if r["way"] == "played"]
    report = {
        "exact": {
            **figures["exact"],
            "mass_min": min(r["mass"] for r in exact),
            "mass_mean": sum(r["mass"] for r in exact) / len(exact),
        }
    }
    if played:
        report["played"] = {
            **figures["played"],
            "replies": played[0]["replies"],
            "broken_share": sum(r["broken_share"] for r in played) / len(played),
        }
    return report


STRATEGY_FILES = (ROWS, FIGURES)  # what write_strategy writes, both claimed before either is written


def write_strategy(folder, rows: Sequence[dict], report: dict) -> None:
    """Write ``folder/strategy.jsonl`` (the rows) and ``folder/exploitability.json`` (``report``, from
    :func:`exploitability_report`), each atomically."""
    folder = Path(folder)
    write_jsonl_atomic(folder / ROWS, rows)
    write_json_atomic(folder / FIGURES, report)


SITUATIONS = {"": "no action yet", "check,bet": "check, then a bet", "check": "a check", "bet": "a bet"}


def strategy_table(rows: Sequence[dict]) -> str:
    """The 12 information sets as a table a person reads at a glance: who acts, with which card, after what,
    the aggressive action's probability exactly (and the mass behind it) and as played (its 95% interval and
    the share of replies that break the rules), each way where ``rows`` hold it."""
    exact = {(r["card"], r["history"]): r for r in rows if r["way"] == "exact"}
    played = {(r["card"], r["history"]): r for r in rows if r["way"] == "played"}
    header = f"{'player':<7} {'card':<4} {'after':<17} {'action':<6} {'exact':>6} {'mass':>5}"
    header += f"  {'played [95%]':<20} {'broken':>6}" if played else ""
    lines = [header, "-" * len(header)]
    for infoset in INFOSETS:
        key = (infoset.card, infoset.history)
        e, p = exact.get(key), played.get(key)
        line = f"{infoset.player:<7} {infoset.card:<4} {SITUATIONS[infoset.history]:<17} {infoset.action:<6} "
        line += f"{e['probability']:>6.3f} {e['mass']:>5.2f}" if e else f"{'-':>6} {'-':>5}"
        if played:
            line += (
                f"  {p['probability']:.3f} [{p['low']:.2f}, {p['high']:.2f}]  {p['broken_share']:>6.0%}"
                if p
                else f"  {'-':<20} {'-':>6}"
            )
        lines.append(line)
    return "\n".join(lines)


def read_strategy_rows(path) -> list[dict]:
    """The rows of a ``strategy.jsonl`` that :func:`write_strategy` wrote (a folder: its ``strategy.jsonl``);
    DataError naming the first record that is not a strategy row, or a way without all 12 information sets."""
    path = Path(path)
    source = path / ROWS if path.is_dir() else path
    rows = read_records(source)
    keys = {(i.card, i.history) for i in INFOSETS}
    for n, row in enumerate(rows):
        if (
            not isinstance(row, dict)
            or row.get("way") not in WAYS
            or (row.get("card"), row.get("history")) not in keys
        ):
            raise DataError(
                source,
                n,
                "not a strategy row (way, card, history and probability, as spag strategy writes them)",
            )
        p = row.get("probability")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise DataError(source, n, f"'probability' must be a number in [0, 1], got {p!r}")
    for way in {r["way"] for r in rows}:
        if {(r["card"], r["history"]) for r in rows if r["way"] == way} != keys:
            raise DataError(source, None, f"the {way} rows do not cover the 12 information sets")
    return rows


def strategy_line(report: dict) -> str:
    """One line of ``report``: each way's chips exploitability and how far to trust it."""
    exact, played = report["exact"], report["played"]
    return (
        f"chips exploitability exact {exact['chips']['exploitability']:.3f} (mass {exact['mass_mean']:.2g}), "
        f"played {played['chips']['exploitability']:.3f} ({played['replies']} replies each, "
        f"{played['broken_share']:.0%} break the rules)"
    )
