"""Game win rates: how often a model wins Adversarial Taboo against an opponent, per role.

The outcome of every episode comes from the judge (``spag.game.rules``); this module only counts.

How outcomes count for the model under evaluation:

- as attacker: ``attacker_wins`` is a win, ``defender_wins`` a loss, ``attacker_breaks_rules`` the
  model's own foul (reported apart from losses, so the four rates add up to 1), ``tie`` a tie.
- as defender: ``defender_wins`` is a win, ``attacker_wins`` a loss, ``tie`` a tie, and the opponent's
  foul (``attacker_breaks_rules``) counts as a **win** for the model, as in the paper, where breaking
  the rules loses the game for the attacker. It is also reported on its own as ``opponent_foul`` so that
  a defender that wins only through its opponent's fouls can be told apart. The defender's win, loss
  and tie rates add up to 1; the defender has no fouls under the rules.
- overall (both roles): wins over all games, the model's fouls over all games, and so on.

Every rate comes with a 95% Wilson score interval (``<name>_low``, ``<name>_high``), which stays inside
[0, 1] and behaves at 0 of n and n of n, where the normal approximation does not. Wilson treats games as
independent; they are not when a word is played in both roles and with several seeds, so the headline
numbers (:func:`word_bootstrap`: score, win and foul rates) come with a bootstrap interval over target
words instead, every game of a word (both roles, all seeds) resampled together.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from spag.evaluate.clustered import clustered_mean
from spag.game.episodes import write_episodes
from spag.game.rules import (
    ATTACKER,
    ATTACKER_BREAKS_RULES,
    ATTACKER_GUESSED,
    ATTACKER_SAID_WORD,
    ATTACKER_WINS,
    CORRECT_GUESS,
    DEFENDER,
    DEFENDER_SAID_WORD,
    DEFENDER_WINS,
    OUT_OF_TURNS,
    TIE,
    WHOLE_WORD,
    WRONG_GUESS,
    judge_episode,
    normalise_word,
)
from spag.io import DataError
from spag.play import PlayConfig, play_games
from spag.players import close_player, load_player
from spag.provenance import record

# outcome -> what it is for the model, per role
_AS_ATTACKER = {ATTACKER_WINS: "win", DEFENDER_WINS: "loss", TIE: "tie", ATTACKER_BREAKS_RULES: "foul"}
_AS_DEFENDER = {DEFENDER_WINS: "win", ATTACKER_WINS: "loss", TIE: "tie", ATTACKER_BREAKS_RULES: "win"}
RESULTS = {ATTACKER: ("win", "loss", "tie", "foul"), DEFENDER: ("win", "loss", "tie", "opponent_foul")}
_PLURAL = {"win": "wins", "loss": "losses", "tie": "ties", "foul": "fouls", "opponent_foul": "opponent_fouls"}


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (scipy's); (0, 1) when there are no trials."""
    from scipy.stats import binomtest

    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    interval = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)


def rate_fields(name: str, count: int, n: int) -> dict[str, float]:
    """``{name}_rate``, ``{name}_rate_low``, ``{name}_rate_high`` for ``count`` of ``n``."""
    low, high = wilson_interval(count, n)
    return {f"{name}_rate": count / n if n else 0.0, f"{name}_rate_low": low, f"{name}_rate_high": high}


def role_result(outcome: str, role: str) -> str:
    """What an outcome is for the player in ``role``: win, loss, tie or foul (attacker only)."""
    table = _AS_ATTACKER if role == ATTACKER else _AS_DEFENDER
    try:
        return table[outcome]
    except KeyError:
        raise ValueError(f"unknown outcome {outcome!r}") from None


def score(outcome: str, role: str) -> float:
    """The game's points for the player in ``role``: 1 for a win, 1/2 for a tie, 0 otherwise."""
    return {"win": 1.0, "tie": 0.5}.get(role_result(outcome, role), 0.0)


def tally_role(outcomes: Iterable[str], role: str) -> dict[str, float | int]:
    """Counts and rates (with Wilson intervals) of one role's outcomes."""
    if role not in (ATTACKER, DEFENDER):
        raise ValueError(f"unknown role {role!r}")
    outcomes = list(outcomes)
    counts = Counter(role_result(o, role) for o in outcomes)
    if role == DEFENDER:
        counts["opponent_foul"] = sum(1 for o in outcomes if o == ATTACKER_BREAKS_RULES)
    n = len(outcomes)
    summary: dict[str, float | int] = {"games": n}
    for name in RESULTS[role]:
        summary[_PLURAL[name]] = counts[name]
        summary.update(rate_fields(name, counts[name], n))
    return summary


def tally_games(as_attacker: Iterable[Mapping], as_defender: Iterable[Mapping]) -> dict:
    """The metrics of one model from its judged episodes in each role.

    ``as_attacker``: episodes where the model attacked; ``as_defender``: where it defended. Each needs
    an ``outcome`` from the judge.
    """
    attack = [_outcome(e, i) for i, e in enumerate(as_attacker)]
    defend = [_outcome(e, i) for i, e in enumerate(as_defender)]
    attacker, defender = tally_role(attack, ATTACKER), tally_role(defend, DEFENDER)
    n = len(attack) + len(defend)
    wins, losses, ties = (attacker[k] + defender[k] for k in ("wins", "losses", "ties"))
    fouls = attacker["fouls"]
    overall: dict[str, float | int] = {"games": n, "wins": wins, "losses": losses, "ties": ties,
                                       "fouls": fouls}
    for name, count in (("win", wins), ("loss", losses), ("tie", ties), ("foul", fouls)):
        overall.update(rate_fields(name, count, n))
    # Points per game (a tie is half a win): the quantity the tournament's ratings are fitted to.
    overall["score"] = (wins + 0.5 * ties) / n if n else 0.0
    return {"attacker": attacker, "defender": defender, "overall": overall, "games": n}


# The outcome decomposition: how each game ended, for the model in each role (see spag.game.rules.CAUSES).
# A role's parts add up to 1; wins by the model's own skill (an induced word, a correct guess) stand apart
# from wins handed over by the opponent's mistake (a wrong guess, a foul).
DECOMPOSITION = {
    ATTACKER: {DEFENDER_SAID_WORD: "win_induced_word", WRONG_GUESS: "win_opponent_wrong_guess",
               CORRECT_GUESS: "loss_opponent_correct_guess", ATTACKER_SAID_WORD: "foul_said_word",
               ATTACKER_GUESSED: "foul_guessed", OUT_OF_TURNS: "tie"},
    DEFENDER: {CORRECT_GUESS: "win_correct_guess", ATTACKER_SAID_WORD: "win_opponent_foul",
               ATTACKER_GUESSED: "win_opponent_foul", DEFENDER_SAID_WORD: "loss_said_word",
               WRONG_GUESS: "loss_wrong_guess", OUT_OF_TURNS: "tie"},
}


def cause_of(episode: Mapping, index: int = 0) -> str:
    """How a judged game ended (``spag.game.rules.CAUSES``): the judge again, under the episode's own
    rules; it must agree with the stored outcome."""
    verdict = judge_episode(episode, episode.get("rules") or WHOLE_WORD)
    if verdict.outcome != _outcome(episode, index):
        raise ValueError(f"episode {index} ({episode['target_word']!r}): stored outcome {episode['outcome']!r} "
                         f"but the judge says {verdict.outcome!r}")
    return verdict.cause


def word_bootstrap(as_attacker: Iterable[Mapping], as_defender: Iterable[Mapping], confidence: float = 0.95,
                   n_resamples: int = 10_000, seed: int = 0) -> dict:
    """Score, win and foul rates of the model with bootstrap intervals over target words.

    ``as_attacker`` / ``as_defender``: judged episodes where the model attacked / defended, any number
    per word (several seeds). Words are resampled with all their games in both roles, so the interval
    accounts for games of the same word being alike. Returns ``{name: {value, low, high, games, words}}``
    for ``score`` (win 1, tie 1/2, loss or foul 0, both roles), ``attacker_win_rate``,
    ``attacker_foul_rate``, ``defender_win_rate`` and ``defender_opponent_foul_rate``, and under
    ``decomposition`` ``{role: {part: entry}}``: the share of the role's games that ended each way of
    :data:`DECOMPOSITION`.
    """
    import polars as pl

    quantities = {  # name -> (role, value of one game for the model, from its outcome and cause)
        "attacker_win_rate": (ATTACKER, lambda o, c: float(o == ATTACKER_WINS)),
        "attacker_foul_rate": (ATTACKER, lambda o, c: float(o == ATTACKER_BREAKS_RULES)),
        "defender_win_rate": (DEFENDER, lambda o, c: float(role_result(o, DEFENDER) == "win")),
        "defender_opponent_foul_rate": (DEFENDER, lambda o, c: float(o == ATTACKER_BREAKS_RULES)),
    }
    for role, parts in DECOMPOSITION.items():
        for part in dict.fromkeys(parts.values()):
            quantities[f"{role}/{part}"] = (role, lambda o, c, r=role, p=part: float(DECOMPOSITION[r][c] == p))
    names = ("score", *quantities)
    games = []  # one record per game: its word, its score, and each quantity of its role (others null)
    for role, episodes in ((ATTACKER, as_attacker), (DEFENDER, as_defender)):
        for i, episode in enumerate(episodes):
            outcome, cause = _outcome(episode, i), cause_of(episode, i)
            games.append({"word": episode["target_word"], "score": score(outcome, role),
                          **{name: value(outcome, cause) if role == wanted else None
                             for name, (wanted, value) in quantities.items()}})
    frame = pl.DataFrame(games, schema={"word": pl.String, **{name: pl.Float64 for name in names}})
    per_word = frame.group_by("word").agg(  # sums and counts per word: the bootstrap resamples words
        *(pl.col(name).sum().alias(f"{name}_sum") for name in names),
        *(pl.col(name).count().alias(f"{name}_games") for name in names),
    ).sort("word")
    out: dict = {"decomposition": {role: {} for role in DECOMPOSITION}}
    for name in names:
        played = per_word.filter(pl.col(f"{name}_games") > 0)
        entry = clustered_mean(played[f"{name}_sum"].to_numpy(), played[f"{name}_games"].to_numpy(), seed=seed,
                               confidence=confidence, n_resamples=n_resamples)
        role, _, part = name.partition("/")
        if part:
            out["decomposition"][role][part] = entry
        else:
            out[name] = entry
    return out


def per_word_scores(as_attacker: Iterable[Mapping], as_defender: Iterable[Mapping]) -> dict[str, tuple[float, int]]:
    """``{word: (points, games)}`` of the model over both roles: what paired comparisons resample."""
    points: dict[str, list] = {}
    for role, episodes in ((ATTACKER, as_attacker), (DEFENDER, as_defender)):
        for i, episode in enumerate(episodes):
            entry = points.setdefault(episode["target_word"], [0.0, 0])
            entry[0] += score(_outcome(episode, i), role)
            entry[1] += 1
    return {word: (s, n) for word, (s, n) in points.items()}


def per_word_by_role(as_attacker: Iterable[Mapping], as_defender: Iterable[Mapping]) -> dict[str, dict]:
    """Per role, ``{word: (sum, games)}`` of the model's score (``ROLE/score``) and of each way its games
    ended (``ROLE/PART`` of :data:`DECOMPOSITION`): what pooling runs role by role resamples."""
    out: dict[str, dict] = {}
    for role, episodes in ((ATTACKER, as_attacker), (DEFENDER, as_defender)):
        parts = dict.fromkeys(DECOMPOSITION[role].values())
        for i, episode in enumerate(episodes):
            outcome, ended = _outcome(episode, i), DECOMPOSITION[role][cause_of(episode, i)]
            values = {"score": score(outcome, role), **{part: float(part == ended) for part in parts}}
            for name, value in values.items():
                entry = out.setdefault(f"{role}/{name}", {}).setdefault(episode["target_word"], [0.0, 0])
                entry[0] += value
                entry[1] += 1
    return {name: {w: (s, n) for w, (s, n) in words.items()} for name, words in out.items()}


def _outcome(episode: Mapping, index: int) -> str:
    outcome = episode.get("outcome")
    if outcome is None:
        raise ValueError(f"episode {index} has not been judged (no 'outcome')")
    return outcome


# ------------------------------------------------------------------------------------ playing the games


def check_held_out(words: list[str], train_words: Iterable[str], source: str = "<words>",
                   train_source: str = "<train words>") -> None:
    """Refuse evaluation words that the model trained on: raise DataError naming a few of them."""
    seen = {normalise_word(w) for w in train_words}
    overlap = [w for w in words if normalise_word(w) in seen]
    if overlap:
        shown = ", ".join(overlap[:5]) + (", ..." if len(overlap) > 5 else "")
        raise DataError(source, None, f"{len(overlap)} of {len(words)} evaluation words are also training "
                                      f"words in {train_source} ({shown}); evaluate on held-out words")


def model_name(model) -> str:
    """A label for a model: the path or name as given, or the player's own name."""
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    return str(getattr(model, "name", None) or type(model).__name__)


def evaluate_models(model, opponent, words: list[str], config=None, episodes_out=None, *,
                    backend: str = "hf", resume: bool = False, show_progress: bool = True, seeds: int = 1,
                    stale: str = "refuse", guess_words: list[str] | None = None, **player_options) -> dict:
    """Play ``model`` against ``opponent`` in both roles on ``words`` and return the metrics.

    ``model`` and ``opponent`` are paths/names, loaded once each with ``load_player(backend,
    **player_options)`` (once in all when they are the same), or ready players. ``config`` is a
    ``spag.play.PlayConfig`` (default: greedy decoding, as the paper evaluates). ``episodes_out``: a
    folder that gets ``as_attacker.parquet`` and ``as_defender.parquet``, written as games finish (so
    ``resume=True`` continues an interrupted run; ``stale`` says what to do with games of another run,
    as in :func:`spag.play.play_games`), or one ``.parquet`` file written at the end.

    ``seeds`` > 1 plays every word that many times per role, with sampling seeds ``config.seed``,
    ``config.seed + 1``, ...; the games of seed ``s`` go to ``episodes_out/seed_<s>/`` (greedy decoding
    plays one seed: the others would repeat it). The result's ``bootstrap`` holds score, win and foul
    rates with 95% intervals from a bootstrap over words (:func:`word_bootstrap`), and the outcome
    decomposition per role; ``per_word`` each word's points and games, for paired comparisons.
    ``guess_words``: the vocabulary of a player whose strategies include the dictionary guess.
    """
    if not words:
        raise ValueError("no evaluation words")
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    if config is None:
        config = PlayConfig(temperature=0.0)
    if config.temperature == 0:
        seeds = 1
    if episodes_out is not None and Path(episodes_out).suffix == ".parquet" and (resume or seeds > 1):
        raise ValueError("resuming or several seeds need a folder for --episodes-out, not one .parquet file")

    def load(m):
        return load_player(str(m), backend, **player_options) if isinstance(m, (str, os.PathLike)) else m

    player = load(model)
    rival = player if model_name(opponent) == model_name(model) else load(opponent)
    provenance = record(model=player, opponent=rival)
    as_attacker, as_defender = [], []
    try:
        for s in range(seeds):
            out = episodes_out
            if episodes_out is not None and seeds > 1:
                out = Path(episodes_out) / f"seed_{s}"
            attack, defend = _play_both_roles(player, rival, words, replace(config, seed=config.seed + s), out,
                                              resume=resume, show_progress=show_progress, stale=stale,
                                              guess_words=guess_words)
            as_attacker += attack
            as_defender += defend
    finally:  # the players this call loaded; a caller's own players stay open
        close_player(*(p for p, given in ((player, model), (rival, opponent)) if given is not p))
    metrics = tally_games(as_attacker, as_defender)
    return {"model": model_name(model), "opponent": model_name(opponent), **metrics,
            "bootstrap": word_bootstrap(as_attacker, as_defender, seed=config.seed),
            "per_word": per_word_scores(as_attacker, as_defender),
            "max_turns": int(config.max_turns), "temperature": float(config.temperature),
            "seeds": seeds, "first_seed": int(config.seed), "provenance": provenance}


def _play_both_roles(player, rival, words: list[str], config, episodes_out, *, resume: bool,
                     show_progress: bool, stale: str, guess_words: list[str] | None) -> tuple[list, list]:
    """The games of ``player`` as attacker and as defender against ``rival``, saved to ``episodes_out``."""
    attack_out = defend_out = single_file = None
    if episodes_out is not None:
        episodes_out = Path(episodes_out)
        if episodes_out.suffix == ".parquet":
            single_file = episodes_out
        else:
            attack_out = episodes_out / "as_attacker.parquet"
            defend_out = episodes_out / "as_defender.parquet"
    as_attacker = list(play_games(player, rival, words, config, output=attack_out, resume=resume,
                                  show_progress=show_progress, stale=stale, guess_words=guess_words))
    as_defender = list(play_games(rival, player, words, config, output=defend_out, resume=resume,
                                  show_progress=show_progress, stale=stale, guess_words=guess_words))
    if single_file is not None:
        write_episodes(as_attacker + as_defender, single_file, replace="any")  # claimed by the caller
    return as_attacker, as_defender
