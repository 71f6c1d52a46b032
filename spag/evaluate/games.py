"""Game win rates: how often a model wins against an opponent, per role, whatever the game.

The outcome of every episode comes from the game's judge (:mod:`spag.game`); this module only counts.
How an outcome counts for the model in a role (:meth:`spag.game.base.Game.result`): a win, a loss, a tie
(nobody won), or a foul (the model broke the rules); the opponent's foul counts as a **win** for the model,
as in the paper, where breaking the rules loses the game. It is also reported on its own
(``opponent_foul``) so that a model that wins only through its opponent's fouls can be told apart. In
Adversarial Taboo only the attacker can foul: the attacker's win, loss, tie and foul rates add up to 1, and
so do the defender's win, loss and tie rates.

Every rate comes with a 95% Wilson score interval (``<name>_low``, ``<name>_high``), which stays inside
[0, 1] and behaves at 0 of n and n of n, where the normal approximation does not. Wilson treats games as
independent; they are not when a target is played in both roles and with several seeds, so the headline
numbers (:func:`word_bootstrap`: score, win and foul rates) come with a bootstrap interval over targets
instead, every game of a target (both roles, all seeds) resampled together.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from spag.game.base import Game
from spag.game.episodes import read_episodes, write_episodes
from spag.game.registry import episode_game
from spag.play.engine import Match, OpeningLines, PlayConfig, play_matches
from spag.players import close_player, load_player
from spag.players.provenance import record
from spag.runtime.errors import DataError
from spag.runtime.statistics import clustered_mean

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


def offenders(game: Game) -> set[str]:
    """The roles that can break the rules in ``game``."""
    return {offender for _, offender in game.outcome_sides.values() if offender}


def results(game: Game, role: str) -> tuple[str, ...]:
    """What a game can be for the player in ``role``: win, loss, tie, its own foul where the role can
    break the rules, and the opponent's foul (counted among its wins too) where the opponent can."""
    fouls = offenders(game)
    return (
        "win",
        "loss",
        "tie",
        *(("foul",) if role in fouls else ()),
        *(("opponent_foul",) if game.other(role) in fouls else ()),
    )


def role_result(game: Game, outcome: str, role: str) -> str:
    """What an outcome is for the player in ``role``: win (the opponent's foul too), loss, tie or foul."""
    result = game.result(outcome, role)
    return "win" if result == "opponent_foul" else result


def score(game: Game, outcome: str, role: str) -> float:
    """The game's points for the player in ``role``: 1 for a win, 1/2 for a tie, 0 otherwise."""
    return game.score(outcome, role)


def tally_role(game: Game, outcomes: Iterable[str], role: str) -> dict[str, float | int]:
    """Counts and rates (with Wilson intervals) of one role's outcomes."""
    if role not in game.roles:
        raise ValueError(f"unknown role {role!r}")
    outcomes = list(outcomes)
    counts = Counter(role_result(game, o, role) for o in outcomes)
    counts["opponent_foul"] = sum(1 for o in outcomes if game.result(o, role) == "opponent_foul")
    n = len(outcomes)
    summary: dict[str, float | int] = {"games": n}
    for name in results(game, role):
        summary[_PLURAL[name]] = counts[name]
        summary.update(rate_fields(name, counts[name], n))
    return summary


def tally_games(game: Game, as_first: Iterable[Mapping], as_second: Iterable[Mapping]) -> dict:
    """The metrics of one model from its judged episodes in each role.

    ``as_first``: episodes where the model played the opening role (Adversarial Taboo's attacker);
    ``as_second``: the other role. Each needs an ``outcome`` from the judge.
    """
    tallies = {
        role: tally_role(game, [_outcome(e, i) for i, e in enumerate(episodes)], role)
        for role, episodes in zip(game.roles, (as_first, as_second))
    }
    n = sum(t["games"] for t in tallies.values())
    wins, losses, ties = (sum(t[k] for t in tallies.values()) for k in ("wins", "losses", "ties"))
    fouls = sum(t.get("fouls", 0) for t in tallies.values())
    overall: dict[str, float | int] = {
        "games": n,
        "wins": wins,
        "losses": losses,
        "ties": ties,
        "fouls": fouls,
    }
    for name, count in (("win", wins), ("loss", losses), ("tie", ties), ("foul", fouls)):
        overall.update(rate_fields(name, count, n))
    # Points per game (a tie is half a win): the quantity the tournament's ratings are fitted to.
    overall["score"] = (wins + 0.5 * ties) / n if n else 0.0
    return {**tallies, "overall": overall, "games": n}


def cause_of(game: Game, episode: Mapping, index: int = 0) -> str:
    """How a judged game ended (:attr:`spag.game.base.Game.causes`): the judge again, under the settings
    the episode recorded (else ``game``'s); it must agree with the stored outcome."""
    verdict = episode_game(episode, game).judge_episode(episode)
    if verdict.outcome != _outcome(episode, index):
        raise ValueError(
            f"episode {index} ({episode['target_word']!r}): stored outcome {episode['outcome']!r} "
            f"but the judge says {verdict.outcome!r}"
        )
    return verdict.cause


def _quantities(game: Game) -> dict:
    """The headline rates per role, each ``name -> (role, value of a game from its outcome)``."""
    out = {}
    for role in game.roles:
        out[f"{role}_win_rate"] = (role, lambda o, r=role: float(role_result(game, o, r) == "win"))
        for kind in results(game, role)[3:]:
            out[f"{role}_{kind}_rate"] = (role, lambda o, r=role, k=kind: float(game.result(o, r) == k))
    return out


def word_bootstrap(
    game: Game,
    as_first: Iterable[Mapping],
    as_second: Iterable[Mapping],
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict:
    """Score, win and foul rates of the model with bootstrap intervals over targets.

    ``as_first`` / ``as_second``: judged episodes where the model played each role, any number per target
    (several seeds). Targets are resampled with all their games in both roles, so the interval accounts
    for games of the same target being alike. Returns ``{name: {value, low, high, games, words}}`` for
    ``score`` (win 1, tie 1/2, loss or foul 0, both roles) and each role's rates (Adversarial Taboo:
    ``attacker_win_rate``, ``attacker_foul_rate``, ``defender_win_rate``, ``defender_opponent_foul_rate``),
    and under ``decomposition`` ``{role: {part: entry}}``: the share of the role's games that ended each
    way of :attr:`spag.game.base.Game.parts`.
    """
    import polars as pl

    quantities = {
        name: (role, lambda o, c, v=value: v(o)) for name, (role, value) in _quantities(game).items()
    }
    for role, parts in game.parts.items():
        for part in dict.fromkeys(parts.values()):
            quantities[f"{role}/{part}"] = (role, lambda o, c, r=role, p=part: float(game.parts[r][c] == p))
    names = ("score", *quantities)
    games = []  # one record per game: its target, its score, and each quantity of its role (others null)
    for role, episodes in zip(game.roles, (as_first, as_second)):
        for i, episode in enumerate(episodes):
            outcome, cause = _outcome(episode, i), cause_of(game, episode, i)
            games.append(
                {
                    "word": episode["target_word"],
                    "score": score(game, outcome, role),
                    **{
                        name: value(outcome, cause) if role == wanted else None
                        for name, (wanted, value) in quantities.items()
                    },
                }
            )
    frame = pl.DataFrame(games, schema={"word": pl.String, **{name: pl.Float64 for name in names}})
    per_word = (
        frame.group_by("word")
        .agg(  # sums and counts per target: the bootstrap resamples targets
            *(pl.col(name).sum().alias(f"{name}_sum") for name in names),
            *(pl.col(name).count().alias(f"{name}_games") for name in names),
        )
        .sort("word")
    )
    out: dict = {"decomposition": {role: {} for role in game.parts}}
    for name in names:
        played = per_word.filter(pl.col(f"{name}_games") > 0)
        entry = clustered_mean(
            played[f"{name}_sum"].to_numpy(),
            played[f"{name}_games"].to_numpy(),
            seed=seed,
            confidence=confidence,
            n_resamples=n_resamples,
        )
        role, _, part = name.partition("/")
        if part:
            out["decomposition"][role][part] = entry
        else:
            out[name] = entry
    return out


def per_word_scores(
    game: Game, as_first: Iterable[Mapping], as_second: Iterable[Mapping]
) -> dict[str, tuple[float, int]]:
    """``{target: (points, games)}`` of the model over both roles: what paired comparisons resample."""
    points: dict[str, list] = {}
    for role, episodes in zip(game.roles, (as_first, as_second)):
        for i, episode in enumerate(episodes):
            entry = points.setdefault(episode["target_word"], [0.0, 0])
            entry[0] += score(game, _outcome(episode, i), role)
            entry[1] += 1
    return {word: (s, n) for word, (s, n) in points.items()}


def per_word_by_role(
    game: Game, as_first: Iterable[Mapping], as_second: Iterable[Mapping]
) -> dict[str, dict]:
    """Per role, ``{target: (sum, games)}`` of the model's score (``ROLE/score``) and of each way its games
    ended (``ROLE/PART`` of :attr:`spag.game.base.Game.parts`): what pooling runs role by role resamples."""
    out: dict[str, dict] = {}
    for role, episodes in zip(game.roles, (as_first, as_second)):
        parts = dict.fromkeys(game.parts[role].values())
        for i, episode in enumerate(episodes):
            outcome, ended = _outcome(episode, i), game.parts[role][cause_of(game, episode, i)]
            values = {"score": score(game, outcome, role), **{part: float(part == ended) for part in parts}}
            for name, value in values.items():
                entry = out.setdefault(f"{role}/{name}", {}).setdefault(episode["target_word"], [0.0, 0])
                entry[0] += value
                entry[1] += 1
    return {name: {w: (s, n) for w, (s, n) in words.items()} for name, words in out.items()}


def strongest(results: Mapping[str, dict]) -> str | None:
    """The baseline with the highest score against the imitation model (``results``: name -> games.json
    entry of that match); of equal scores, the first name in alphabetical order."""
    if not results:
        return None
    return max(sorted(results), key=lambda name: results[name]["bootstrap"]["score"]["value"])


def _outcome(episode: Mapping, index: int) -> str:
    outcome = episode.get("outcome")
    if outcome is None:
        raise ValueError(f"episode {index} has not been judged (no 'outcome')")
    return outcome


# ------------------------------------------------------------------------------------ playing the games


def check_held_out(
    game: Game,
    words: list[str],
    train_words: Iterable[str],
    source: str = "<words>",
    train_source: str = "<train words>",
) -> None:
    """Refuse evaluation targets that the model trained on: raise DataError naming a few of them."""
    seen = {game.same_target(w) for w in train_words}
    overlap = [w for w in words if game.same_target(w) in seen]
    if overlap:
        shown = ", ".join(overlap[:5]) + (", ..." if len(overlap) > 5 else "")
        raise DataError(
            source,
            None,
            f"{len(overlap)} of {len(words)} evaluation words are also training "
            f"words in {train_source} ({shown}); evaluate on held-out words",
        )


def model_name(model) -> str:
    """A label for a model: the path or name as given, or the player's own name."""
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    return str(getattr(model, "name", None) or type(model).__name__)


def _match_settings(words: list[str], config, seeds: int, episodes_out, resume: bool):
    """(the match's PlayConfig, its number of seeds), checked: greedy decoding plays one seed."""
    if not words:
        raise ValueError("no evaluation words")
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    if config is None:
        config = PlayConfig.of(temperature=0.0)
    if config.sampling.temperature == 0:
        seeds = 1
    if episodes_out is not None and Path(episodes_out).suffix == ".parquet" and (resume or seeds > 1):
        raise ValueError("resuming or several seeds need a folder for --episodes-out, not one .parquet file")
    return config, seeds


def evaluate_models(
    model,
    opponent,
    words: list[str],
    config=None,
    episodes_out=None,
    *,
    backend: str = "hf",
    resume: bool = False,
    show_progress: bool = True,
    seeds: int = 1,
    stale: str = "refuse",
    guess_words: list[str] | None = None,
    openings: OpeningLines | None = None,
    **player_options,
) -> dict:
    """Play ``model`` against ``opponent`` in both roles on ``words`` and return the metrics.

    ``model`` and ``opponent`` are paths/names, loaded once each with ``load_player(backend,
    **player_options)`` (once in all when they are the same), or ready players. ``config`` is a
    ``spag.play.engine.PlayConfig`` (default: greedy decoding, as the paper evaluates). ``episodes_out``: a
    folder that gets ``as_<role>.parquet`` for each role of the game (Adversarial Taboo:
    ``as_attacker.parquet`` and ``as_defender.parquet``), written as games finish (so
    ``resume=True`` continues an interrupted run; ``stale`` says what to do with games of another run,
    as in :func:`spag.play.engine.play_games`), or one ``.parquet`` file written at the end.

    ``seeds`` > 1 plays every word that many times per role, with sampling seeds ``config.seed``,
    ``config.seed + 1``, ...; the games of seed ``s`` go to ``episodes_out/seed_<s>/`` (greedy decoding
    plays one seed: the others would repeat it). The result's ``bootstrap`` holds score, win and foul
    rates with 95% intervals from a bootstrap over words (:func:`word_bootstrap`), and the outcome
    decomposition per role; ``per_word`` each word's points and games, for paired comparisons.
    ``guess_words``: the vocabulary of a player whose strategies include the dictionary guess.
    ``openings`` (:class:`spag.play.engine.OpeningLines`): the games' opening lines, shared with the other
    matches of the caller's evaluation (a player's opening lines are the same against every opponent);
    by default with this call's two matches only.
    """
    config, seeds = _match_settings(words, config, seeds, episodes_out, resume)

    def load(m):
        return load_player(str(m), backend, **player_options) if isinstance(m, (str, os.PathLike)) else m

    player = load(model)
    rival = player if model_name(opponent) == model_name(model) else load(opponent)
    provenance = record(model=player, opponent=rival)
    as_attacker, as_defender = [], []
    openings = OpeningLines() if openings is None else openings
    try:
        for s in range(seeds):
            out = episodes_out
            if episodes_out is not None and seeds > 1:
                out = Path(episodes_out) / f"seed_{s}"
            attack, defend = _play_both_roles(
                player,
                rival,
                words,
                replace(config, seed=config.seed + s),
                out,
                resume=resume,
                show_progress=show_progress,
                stale=stale,
                guess_words=guess_words,
                openings=openings,
            )
            as_attacker += attack
            as_defender += defend
    finally:  # the players this call loaded; a caller's own players stay open
        close_player(*(p for p, given in ((player, model), (rival, opponent)) if given is not p))
    return {
        "model": model_name(model),
        "opponent": model_name(opponent),
        **_match_metrics(config, as_attacker, as_defender),
        "seeds": seeds,
        "first_seed": int(config.seed),
        "provenance": provenance,
    }


def _match_metrics(config, as_attacker: list, as_defender: list) -> dict:
    """A match's tallies, its bootstrap over words and each word's points."""
    game = config.game
    return {
        **tally_games(game, as_attacker, as_defender),
        "bootstrap": word_bootstrap(game, as_attacker, as_defender, seed=config.seed),
        "per_word": per_word_scores(game, as_attacker, as_defender),
        "max_turns": int(game.max_turns),
        "temperature": float(config.sampling.temperature),
    }


def opening_lines_played(
    episodes_out: str | os.PathLike, game: Game, words: list[str], seeds: int = 1
) -> list[str] | None:
    """The opening utterances of the model :func:`evaluate_models` played in the opening role into
    ``episodes_out`` on ``words``, seed by seed, words in order: what ``PlayConfig.opening_lines`` gives for
    the same model and seeds (a game's first line is said before its opponent speaks). None when a game is
    missing or a word repeats, so the caller generates the lines instead."""
    if len(set(words)) != len(words):
        return None
    lines = []
    for s in range(seeds):
        folder = Path(episodes_out) / f"seed_{s}" if seeds > 1 else Path(episodes_out)
        path = folder / f"as_{game.roles[0]}.parquet"
        if not path.is_file():
            return None
        first = {
            e["target_word"]: e["history"][0]["content"] for e in read_episodes(path, game) if e["history"]
        }
        if not set(words) <= set(first):
            return None
        lines += [first[w] for w in words]
    return lines


def _play_both_roles(
    player,
    rival,
    words: list[str],
    config,
    episodes_out,
    *,
    resume: bool,
    show_progress: bool,
    stale: str,
    guess_words: list[str] | None,
    openings: OpeningLines,
) -> tuple[list, list]:
    """The games of ``player`` in the opening role and in the other against ``rival``, played together
    (:func:`spag.play.engine.play_matches`) and saved to ``episodes_out``."""
    attack_out = defend_out = single_file = None
    if episodes_out is not None:
        episodes_out = Path(episodes_out)
        if episodes_out.suffix == ".parquet":
            single_file = episodes_out
        else:
            attack_out, defend_out = (episodes_out / f"as_{role}.parquet" for role in config.game.roles)
    # The two matches in step, so each player answers both matches' turns in one call.
    as_attacker, as_defender = play_matches(
        [Match(player, rival, attack_out), Match(rival, player, defend_out)],
        words,
        config,
        resume=resume,
        show_progress=show_progress,
        stale=stale,
        guess_words=guess_words,
        openings=openings,
    )
    if single_file is not None:
        write_episodes(as_attacker + as_defender, single_file)  # claimed by the caller
    return as_attacker, as_defender
