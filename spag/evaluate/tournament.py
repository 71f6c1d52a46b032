"""A round robin between checkpoints: win-rate matrix, Elo ratings with bootstrap intervals, heatmap.

Every pair of models plays both roles on the same held-out targets. A game gives its winner 1 point and
the loser 0, a tie 1/2 each; a rule break is a win for the opponent (see :mod:`spag.evaluate.games`).

Ratings follow the Bradley-Terry model on the Elo scale: the expected score of i against j is
``1 / (1 + 10 ** ((R_j - R_i) / 400))``. They are fitted by maximum likelihood to all games at once (not
by the order-dependent online Elo update), with ties as half a win. To keep the estimate finite when a
model wins every game, each pair of models is given one extra drawn game (a weak prior towards equal
strength, worth one game against the many real ones). Ratings are shifted so that their mean is 1000.
The 95% intervals are percentiles of the ratings refitted on resampled games. Games are resampled by
target word (every game on a word, all pairs, roles and seeds, together), since games of one word are
alike: the same clustering as every other interval of the evaluation (:mod:`spag.runtime.statistics`).
The score matrix carries the same word-clustered interval for each pair.

Players can be checkpoints or the game's no-training baselines (:class:`spag.game.base.SkillMetrics`;
Adversarial Taboo's: :mod:`spag.game.taboo.baselines`): a cross-play tournament of base, imitation, SPAG
epochs, ablation arms and baselines on fresh words.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spag.game.episodes import write_episodes
from spag.game.registry import episode_game
from spag.play.engine import PlayConfig, play_games
from spag.players import close_player, forget_prompts, load_player
from spag.runtime.atomic import atomic_path
from spag.runtime.statistics import clustered_mean

ELO_SCALE = 400.0
ELO_MEAN = 1000.0


@dataclass(frozen=True)
class Match:
    """One game between models ``a`` and ``b`` (indices), with ``a``'s points: 1, 1/2 or 0, on the target
    word with index ``word`` (the unit the intervals resample)."""

    a: int
    b: int
    score_a: float
    word: int = 0


def _pair_tables(games_a: np.ndarray, games_b: np.ndarray, scores: np.ndarray, k: int):
    """(points[i, j] of i against j, games[i, j] between i and j), both k x k."""
    points = np.zeros((k, k))
    played = np.zeros((k, k))
    np.add.at(points, (games_a, games_b), scores)
    np.add.at(points, (games_b, games_a), 1.0 - scores)
    np.add.at(played, (games_a, games_b), 1.0)
    np.add.at(played, (games_b, games_a), 1.0)
    return points, played


def fit_bradley_terry(
    points: np.ndarray, played: np.ndarray, prior_draws: float = 1.0, tol: float = 1e-9, max_iter: int = 100
) -> np.ndarray:
    """Elo-scale ratings (mean 1000) maximising the Bradley-Terry likelihood of the pair tables.

    ``points[i, j]``: i's points against j (ties as halves); ``played[i, j]``: their games.
    ``prior_draws`` drawn games are added between every pair of models that met. The log-likelihood
    ``sum_ij points_ij * log sigmoid(t_i - t_j)`` is concave in the natural-log strengths t, so Newton's
    method (with the steps capped, and t kept at mean 0) reaches the maximum in a few iterations.
    """
    k = points.shape[0]
    met = (played > 0) & ~np.eye(k, dtype=bool)
    points = points + 0.5 * prior_draws * met
    played = played + prior_draws * met
    wins = points.sum(axis=1)
    theta = np.zeros(k)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(theta[None, :] - theta[:, None]))  # p[i, j]: i beats j
        gradient = wins - (played * p).sum(axis=1)
        curvature = played * p * (1.0 - p)
        hessian = curvature - np.diag(curvature.sum(axis=1))  # negative semi-definite, null space 1
        step = np.linalg.lstsq(-hessian, gradient, rcond=None)[0]
        step = np.clip(step - step.mean(), -2.0, 2.0)
        theta = theta + step
        if np.max(np.abs(step)) < tol:
            break
    ratings = ELO_SCALE * theta / math.log(10)
    return ratings - ratings.mean() + ELO_MEAN


def elo_ratings(
    games: Sequence[Match], k: int, resamples: int = 1000, seed: int = 0, prior_draws: float = 1.0
) -> dict[str, np.ndarray]:
    """Ratings and their 95% bootstrap intervals: ``{"rating", "low", "high"}`` arrays of length k."""
    if not games:
        raise ValueError("no games to rate")
    a = np.array([g.a for g in games])
    b = np.array([g.b for g in games])
    s = np.array([g.score_a for g in games], dtype=float)
    rating = fit_bradley_terry(*_pair_tables(a, b, s, k), prior_draws=prior_draws)
    rng = np.random.default_rng(seed)
    samples = np.empty((resamples, k))
    by_word = _games_by_word(games)
    for r in range(resamples):
        idx = np.concatenate([by_word[w] for w in rng.integers(0, len(by_word), size=len(by_word))])
        samples[r] = fit_bradley_terry(*_pair_tables(a[idx], b[idx], s[idx], k), prior_draws=prior_draws)
    if resamples:
        low, high = np.percentile(samples, [2.5, 97.5], axis=0)
    else:
        low = high = np.full(k, math.nan)
    return {"rating": rating, "low": low, "high": high}


def _games_by_word(games: Sequence[Match]) -> list[np.ndarray]:
    """The indices of each word's games: the clusters a bootstrap resamples."""
    words: dict[int, list[int]] = {}
    for i, g in enumerate(games):
        words.setdefault(g.word, []).append(i)
    return [np.array(v) for v in words.values()]


def expected_score(rating_a: float, rating_b: float) -> float:
    return 1.0 / (1.0 + 10 ** ((rating_b - rating_a) / ELO_SCALE))


# ------------------------------------------------------------------------------------ from episodes


def games_from_episodes(episodes: Sequence[Mapping], names: Sequence[str]) -> list[Match]:
    """One Match per judged episode, from its ``attacker_model`` and ``defender_model`` (the models of the
    opening role and of the other) and its ``outcome``, scored by the episode's game."""
    index = {name: i for i, name in enumerate(names)}
    words: dict[str, int] = {}
    games = []
    for n, episode in enumerate(episodes):
        try:
            attacker, defender = index[episode["attacker_model"]], index[episode["defender_model"]]
        except KeyError as exc:
            raise ValueError(f"episode {n}: model {exc.args[0]!r} is not in the tournament") from None
        word = words.setdefault(episode["target_word"], len(words))
        game = episode_game(episode)
        games.append(Match(attacker, defender, game.score(episode["outcome"], game.roles[0]), word))
    return games


def score_intervals(games: Sequence[Match], names: Sequence[str], seed: int = 0) -> dict:
    """Row model's score against column model (both roles, ties 1/2) with a 95% interval over words:
    ``{row: {col: {value, low, high, games, words}}}``."""
    per_pair: dict[tuple[int, int], dict[int, list[float]]] = {}
    for g in games:
        for me, other, points in ((g.a, g.b, g.score_a), (g.b, g.a, 1.0 - g.score_a)):
            cell = per_pair.setdefault((me, other), {}).setdefault(g.word, [0.0, 0])
            cell[0] += points
            cell[1] += 1
    out: dict = {name: {} for name in names}
    for (i, j), cells in sorted(per_pair.items()):
        sums, counts = zip(*cells.values())
        out[names[i]][names[j]] = clustered_mean(sums, counts, seed=seed)
    return out


def win_matrices(games: Sequence[Match], names: Sequence[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Row model against column model over both roles: ``win_rate`` (ties count 0), ``score``
    (ties count 1/2) and ``games_played``. The diagonal is left out."""
    k = len(names)
    wins = np.zeros((k, k))
    points = np.zeros((k, k))
    played = np.zeros((k, k))
    for g in games:
        played[g.a, g.b] += 1
        played[g.b, g.a] += 1
        points[g.a, g.b] += g.score_a
        points[g.b, g.a] += 1 - g.score_a
        wins[g.a, g.b] += g.score_a == 1.0
        wins[g.b, g.a] += g.score_a == 0.0
    out: dict[str, dict[str, dict[str, float]]] = {"win_rate": {}, "score": {}, "games_played": {}}
    for i, row in enumerate(names):
        for table in out.values():
            table[row] = {}
        for j, col in enumerate(names):
            if i == j or played[i, j] == 0:
                continue
            out["win_rate"][row][col] = float(wins[i, j] / played[i, j])
            out["score"][row][col] = float(points[i, j] / played[i, j])
            out["games_played"][row][col] = int(played[i, j])
    return out


def tournament_metrics(
    episodes: Sequence[Mapping], names: Sequence[str], resamples: int = 1000, seed: int = 0
) -> dict:
    """The tournament's metrics: Elo with intervals, win-rate and score matrices, game counts."""
    games = games_from_episodes(episodes, names)
    elo = elo_ratings(games, len(names), resamples=resamples, seed=seed)
    matrices = win_matrices(games, names)
    return {
        "models": list(names),
        "games": len(games),
        "words": len({g.word for g in games}),
        "elo": {
            name: {
                "rating": float(elo["rating"][i]),
                "low": float(elo["low"][i]),
                "high": float(elo["high"][i]),
            }
            for i, name in enumerate(names)
        },
        **matrices,
        "score_interval": score_intervals(games, names, seed=seed),
        "resamples": resamples,
    }


def unique_names(models: Sequence[str]) -> list[str]:
    """Short labels for model paths: the last path part, made unique by adding parents when needed."""
    parts = [Path(str(m).rstrip("/")).parts or (str(m),) for m in models]
    depth = 1
    while True:
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names) or depth >= max(len(p) for p in parts):
            break
        depth += 1
    if len(set(names)) != len(names):
        raise ValueError(f"the same model is listed twice: {models}")
    return names


# ------------------------------------------------------------------------------------------- heatmap


def save_heatmap(
    matrix: Mapping[str, Mapping[str, float]],
    names: Sequence[str],
    path,
    title: str = "Win rate of row model against column model (both roles)",
) -> None:
    """A PNG heatmap of a row-vs-column matrix, values written in the cells; written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(names)
    grid = np.full((k, k), np.nan)
    for i, row in enumerate(names):
        for j, col in enumerate(names):
            if col in matrix.get(row, {}):
                grid[i, j] = matrix[row][col]
    size = 1.6 + 0.9 * k
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="RdYlGn")
    ax.set_xticks(range(k), labels=names, rotation=45, ha="right")
    ax.set_yticks(range(k), labels=names)
    ax.set_xlabel("opponent")
    ax.set_ylabel("model")
    for i in range(k):
        for j in range(k):
            text = "—" if i == j else ("" if np.isnan(grid[i, j]) else f"{grid[i, j]:.2f}")
            ax.text(j, i, text, ha="center", va="center", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------- the games


def _player_names(
    models: Sequence[str],
    names: Sequence[str] | None,
    baselines: Sequence[str],
    filtered: Sequence[str],
    extras,
    game: str,
) -> tuple[list[str], list[str]]:
    """(the models' names, every player's name: the models, the baselines, the filtered models), checked."""
    if len(models) + len(baselines) < 2:
        raise ValueError("a tournament needs at least two players")
    if (baselines or filtered) and extras is None:
        raise ValueError(f"the game {game} has no baselines or decode-time filter")
    names = list(names) if names is not None else unique_names(models)
    unknown = [label for label in filtered if label not in names]
    if unknown:
        raise ValueError(f"filtered: {', '.join(unknown)} is not a model of the tournament")
    model_names = list(names)
    names += list(baselines) + [f"{label}+filter" for label in filtered]
    if len(set(names)) != len(names):
        raise ValueError(f"two players share a name: {names}")
    return model_names, names


def run_tournament(
    models: Sequence[str],
    words: list[str],
    config=None,
    *,
    backend: str = "hf",
    episodes_out=None,
    heatmap=None,
    resamples: int = 1000,
    seed: int = 0,
    resume: bool = False,
    show_progress: bool = True,
    names: Sequence[str] | None = None,
    baselines: Sequence[str] = (),
    baseline_models: Mapping[str, str] | None = None,
    seeds: int = 1,
    guess_words: Sequence[str] | None = None,
    filtered: Sequence[str] = (),
    **player_options,
) -> dict:
    """Every ordered pair of distinct players plays all ``words`` (so each pair meets in both roles),
    ``seeds`` times (sampling seeds ``config.seed``, +1, ...).

    Players are the checkpoints ``models`` (each loaded once, ``load_player(model, backend,
    **player_options)``, and held for the whole tournament: after each match they drop the prompts kept
    between calls, so memory grows with the number of models, not with their kept prompts; named ``names``
    or by :func:`unique_names`) and the game's no-training
    ``baselines`` (:class:`spag.game.base.SkillMetrics`), built over ``baseline_models`` (``{"imitation":
    path, "base": path}``); ``guess_words`` is the game's vocabulary, for a baseline's strategy that
    chooses among the targets. Each model named in ``filtered`` plays a second time with the game's
    decode-time filter (``NAME+filter``). ``episodes_out``: a
    ``.parquet`` file for all episodes, or a folder with one Parquet file per ordered pair and seed
    (``<attacker>__vs__<defender>[__seed<s>].parquet``; those files let an interrupted tournament resume),
    claimed by the caller. ``replace``: what an existing ``heatmap`` may be replaced by
    (:func:`spag.runtime.atomic.atomic_path`).
    Returns the metrics of :func:`tournament_metrics`.
    """
    if not words:
        raise ValueError("no evaluation words")
    if config is None:
        config = PlayConfig.of(temperature=0.0)
    extras = config.game.skill
    model_names, names = _player_names(models, names, baselines, filtered, extras, config.game.name)
    folder = None
    if episodes_out is not None and Path(episodes_out).suffix != ".parquet":
        folder = Path(episodes_out)
    elif resume:
        raise ValueError("resuming needs a folder for --episodes-out, not one .parquet file")
    loaded: dict[str, object] = {}  # path -> player, each model loaded once
    load = functools.partial(_load_once, loaded, backend, set(map(str, models)), player_options)
    try:
        players = _players(models, baselines, filtered, model_names, extras, baseline_models, load)
        episodes = _every_seed(
            players,
            names,
            words,
            config,
            folder,
            resume,
            show_progress,
            seeds,
            guess_words,
            held=list(loaded.values()),
        )
    finally:
        close_player(*loaded.values())
    if episodes_out is not None and folder is None:
        write_episodes(episodes, episodes_out)  # claimed by the caller
    metrics = tournament_metrics(episodes, names, resamples=resamples, seed=seed)
    if heatmap is not None:
        title = "Score of row player against column player (both roles, ties 1/2)"
        save_heatmap(metrics["score"], names, heatmap, title=title)
    return metrics


def _every_seed(
    players, names, words, config, folder, resume, show_progress, seeds, guess_words, held
) -> list:
    """The round robin once per sampling seed (once in all with greedy decoding), the episodes of each."""
    episodes = []
    for s in range(seeds if config.sampling.temperature else 1):
        suffix = f"__seed{config.seed + s}" if seeds > 1 else ""
        episodes += _round_robin(
            players,
            names,
            words,
            dataclasses.replace(config, seed=config.seed + s),
            folder,
            resume,
            show_progress,
            suffix,
            guess_words,
            held=held,
        )
    return episodes


def _load_once(loaded: dict, backend: str, models: set[str], options: dict, path: str):
    """The player of ``path``, loaded on first use (a model of the tournament on ``backend``, another on hf)."""
    if path not in loaded:
        loaded[path] = load_player(str(path), backend if path in models else "hf", **options)
    return loaded[path]


def _players(models, baselines, filtered, model_names, extras, baseline_models, load) -> list:
    """The tournament's players in the order of its names: the models, the baselines built over the models
    they need, the models with the decode-time filter."""
    players = [load(str(m)) for m in models]
    for name in baselines:
        needs = extras.baseline_model(name)
        model = (baseline_models or {}).get(needs)
        if model is None:
            raise ValueError(f"baseline {name} needs the {needs} model")
        players.append(extras.baseline(name, {needs: load(str(model))}))
    for label in filtered:
        players.append(extras.filtered(players[model_names.index(label)], f"{label}+filter"))
    return players


def _round_robin(
    players, names, words, config, folder, resume, show_progress, suffix="", guess_words=None, held=()
) -> list[dict]:
    """Every ordered pair of players on ``words``, each pair's games stored in ``folder`` as they finish.
    After each match the loaded models ``held`` (those under the players) drop their kept prompts: the
    next match's prompts share little with them, and eight models keeping 2 GB each outgrow a laptop."""
    episodes: list[dict] = []
    for i, attacker in enumerate(players):
        for j, defender in enumerate(players):
            if i == j:
                continue
            shard = folder / f"{_safe(names[i])}__vs__{_safe(names[j])}{suffix}.parquet" if folder else None
            played = play_games(
                attacker,
                defender,
                words,
                config,
                output=shard,
                resume=resume,
                show_progress=show_progress,
                guess_words=guess_words,
            )
            # The labels in the metrics are the tournament's names, whatever the players call themselves.
            episodes.extend({**e, "attacker_model": names[i], "defender_model": names[j]} for e in played)
            forget_prompts(*held)
    return episodes


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
