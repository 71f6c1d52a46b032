"""Rewards and training sets: judged episodes become the rows the trainers learn from.

A row (:mod:`spag.rewards.rows`) of a game pairs a ``prompt``, the user-message text asking ``role`` for its next
utterance given the game so far (the history *before* that utterance), rendered with a training
template drawn at random (seeded), with the ``completion``, the utterance itself, stripped. General
instruction rows (:mod:`spag.rewards.sft`) are mixed in when asked for.

Only decisive games teach anything: the game's judge (:meth:`spag.game.base.Game.judge`, never
re-implemented here) says who won, and the winner's utterances up to the deciding one become rows. Ties and
fouls give nothing.
An utterance that is empty, or was cut at ``max_new_tokens`` (its ``truncated`` flag), never becomes a
row unless ``keep_truncated`` asks for it; the stats count what was dropped.

Reward of the winner's k-th utterance (k = 1..n) in one game, with decay d (0.8 in the paper)::

    r_k = (1/d)^k / sum_j (1/d)^j          so later moves weigh more and each game sums to 1.

In a game played for chips (Kuhn poker), ``reward.payoff: chips`` pays both players instead: each one's
utterances get the decayed shares of the chips it won or lost (:meth:`spag.game.base.Game.chips`), so the
loser's rows carry a negative reward and each game's rows sum to 0.

Beyond the paper's winners-only rows, the ``reward`` section (:class:`spag.config.Reward`) can add a
penalty row for the offender's rule-breaking line, negative rows for the loser's lines, a per-role
baseline, and keep only the wins of the winner's own play (all off by default).

Role weights, with A games that gave rows to the first role (Adversarial Taboo's attacker) and D games that
gave rows to the second (with winners-only rows: each role's wins)::

    w_first = (A + D) / (2A),   w_second = (A + D) / (2D)       (0 for a side with no rows)

so the first role's rows together carry (A + D)/2 of weighted reward, and so do the second's: each role
learns with coefficient 1/2 in expectation however lopsided the games were.

How: the games are judged one by one; their utterances then form one polars frame, in which the rewarded
moves, the shares r_k, the filter of unsound utterances, the baselines and the weights are expressions.
Only the prompts are rendered in a loop, one seeded template draw per row, in game and turn order.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from spag.config import ALL_MOVES, CHIPS, WINNERS, Imitate, Reward
from spag.game.base import Game
from spag.game.episodes import validate_episode
from spag.game.registry import DEFAULT_GAME, game_class
from spag.rewards.ready_made import ready_made_rows
from spag.rewards.rows import SFT, check_output, episode_id, make_row, write_rows
from spag.rewards.sft import load_sft
from spag.runtime.console import progress
from spag.runtime.errors import DataError, SettingError, collect_or_raise
from spag.runtime.records import read_records

DEFAULT_DECAY = Reward.model_fields["decay"].default


def default_game() -> Game:
    """The game of episodes when none is named: Adversarial Taboo with its default settings."""
    return game_class(DEFAULT_GAME)()


# ------------------------------------------------------------------------------------------- the maths


def utterance_rewards(n: int, decay: float = DEFAULT_DECAY) -> list[float]:
    """Rewards of a winner's n utterances: proportional to (1/decay)^k, k = 1..n, summing to 1."""
    if decay <= 0:
        raise ValueError(f"decay must be positive, got {decay}")
    if n <= 0:
        return []
    # decay^(n-k) is (1/decay)^k scaled by decay^n: the same shares, without overflow for long games.
    raw = [decay ** (n - k) for k in range(1, n + 1)]
    total = sum(raw)
    return [r / total for r in raw]


def role_weights(attacker_games: int, defender_games: int) -> tuple[float, float]:
    """(attacker weight, defender weight) so that each role learns with coefficient 1/2 in expectation."""
    games = attacker_games + defender_games
    attacker = games / (2 * attacker_games) if attacker_games else 0.0
    defender = games / (2 * defender_games) if defender_games else 0.0
    return attacker, defender


# ------------------------------------------------------------------------------------------- the stats


@dataclass
class RowStats:
    """What became of every input record, for the summary line and the DVC metrics."""

    records: int = 0
    outcomes: Counter = field(default_factory=Counter)  # judged outcome of every valid episode
    used: int = 0  # decisive games that gave rows
    no_rows: int = 0  # ties, fouls, and decisive games where the winner never spoke
    cut_games: int = 0  # games whose every rewarded utterance was left out (empty or truncated)
    bad: int = 0  # records skipped as malformed
    duplicates: int = 0  # records that repeat an earlier game, left out
    instruction_rows: int = 0  # ready-made prompt/completion rows taken over as they were
    rows: Counter = field(default_factory=Counter)  # rows per role ("sft" for general instruction rows)
    role_games: dict = field(default_factory=dict)  # role -> games that gave it rows
    role_weights: dict = field(default_factory=dict)  # role -> the weight of its rows
    sft_rows: int = 0
    sft_bad: int = 0
    sft_source: str | None = None
    negative_rows: int = 0  # rows with a negative reward (foul penalty, losers' lines)
    dropped_empty: int = 0  # rewarded utterances left out: empty
    dropped_truncated: int = 0  # rewarded utterances left out: cut at max_new_tokens
    baselines: dict = field(default_factory=dict)  # role -> mean reward subtracted (role_baseline)

    def as_dict(self) -> dict:
        return {
            "records": self.records,
            "outcomes": dict(self.outcomes),
            "used": self.used,
            "no_rows": self.no_rows,
            "cut_games": self.cut_games,
            "bad": self.bad,
            "duplicates": self.duplicates,
            "instruction_rows": self.instruction_rows,
            "rows": dict(self.rows),
            "role_games": dict(self.role_games),
            "role_weights": dict(self.role_weights),
            "sft_rows": self.sft_rows,
            "sft_bad": self.sft_bad,
            "sft_source": self.sft_source,
            "negative_rows": self.negative_rows,
            "dropped_empty": self.dropped_empty,
            "dropped_truncated": self.dropped_truncated,
            "baselines": dict(self.baselines),
        }

    def line(self, with_sft: bool = True) -> str:
        outcomes = ", ".join(f"{o} {n}" for o, n in self.outcomes.items() if n)
        parts = [
            (
                f"{self.records} records: {self.used} games used, {self.no_rows} gave no rows (tie/foul), "
                f"{self.bad} skipped as bad"
            )
        ]
        if self.cut_games:
            parts.append(f"{self.cut_games} games left out whole: each rewarded utterance empty or truncated")
        if self.duplicates:
            parts.append(f"{self.duplicates} repeated games left out")
        if self.instruction_rows:
            parts.append(f"{self.instruction_rows} ready-made rows")
        parts.append(f"outcomes: {outcomes or 'none'}")
        rows = ", ".join(f"{k} {v}" for k, v in sorted(self.rows.items())) or "none"
        parts.append(f"rows: {rows}")
        if self.negative_rows:
            parts.append(f"{self.negative_rows} rows with a negative reward")
        if self.dropped_empty or self.dropped_truncated:
            parts.append(
                f"dropped {self.dropped_truncated} truncated and {self.dropped_empty} empty utterances "
                "(--keep-truncated keeps them)"
            )
        if self.baselines:
            parts.append("baselines: " + ", ".join(f"{k} {v:.3g}" for k, v in sorted(self.baselines.items())))
        parts.append("weights: " + ", ".join(f"{role} {w:.4g}" for role, w in self.role_weights.items()))
        if with_sft and self.sft_source:
            skipped = f" ({self.sft_bad} skipped as bad)" if self.sft_bad else ""
            parts.append(f"sft: {self.sft_rows} rows from {self.sft_source}{skipped}")
        elif with_sft:
            parts.append("sft: none (no --sft given, the SFT term has no data)")
        return "; ".join(parts)


# ----------------------------------------------------------------------------------------- game rows


# The moves of a set of games are one polars frame: a row per utterance that earns a reward, with its
# game's position (``game``), its ``turn`` (index in the history), ``role`` and ``reward``.
_KEY = ["game", "role"]


def _utterances(
    episodes: Sequence[Mapping], verdicts: Sequence, game: Game, chips: bool = False
) -> pl.DataFrame:
    """Every utterance of every game's judged part, with the game's outcome, cause, winner, loser and
    offender (the role that broke the rules), and with ``chips`` the chips its speaker won or lost in it."""
    columns: dict[str, list] = {
        "game": [],
        "turn": [],
        "role": [],
        "content": [],
        "truncated": [],
        "chips": [],
    }
    for index, (episode, verdict) in enumerate(zip(episodes, verdicts)):
        judged = episode["history"][: verdict.turns]
        won = game.of_episode(episode).chips(episode["target_word"], judged) if chips else {}
        for turn, utterance in enumerate(judged):
            columns["game"].append(index)
            columns["turn"].append(turn)
            columns["role"].append(utterance["role"])
            columns["content"].append(str(utterance.get("content") or ""))
            columns["truncated"].append(bool(utterance.get("truncated")))
            columns["chips"].append(won.get(utterance["role"]))
    games = pl.DataFrame(
        {
            "game": range(len(verdicts)),
            "outcome": [v.outcome for v in verdicts],
            "cause": [v.cause for v in verdicts],
            "winner": [v.winner for v in verdicts],
            "loser": [game.other(v.winner) if v.winner else None for v in verdicts],
            "offender": [v.offender for v in verdicts],
        },
        schema={
            "game": pl.Int64,
            "outcome": pl.String,
            "cause": pl.String,
            "winner": pl.String,
            "loser": pl.String,
            "offender": pl.String,
        },
    )
    return pl.DataFrame(
        columns,
        schema={
            "game": pl.Int64,
            "turn": pl.Int64,
            "role": pl.String,
            "content": pl.String,
            "truncated": pl.Boolean,
            "chips": pl.Float64,
        },
    ).join(games, on="game", how="left")


def decayed_shares(decay: float) -> pl.Expr:
    """:func:`utterance_rewards` as a polars expression over a frame of moves in turn order: the share of
    each move among its game's moves of the same role, (1/decay)^k normalised to sum to 1."""
    k = pl.col("turn").rank("ordinal").over(_KEY)
    raw = pl.lit(decay, dtype=pl.Float64).pow(pl.len().over(_KEY) - k)
    return raw / raw.sum().over(_KEY)


def _fair_moves(utterances: pl.DataFrame) -> pl.DataFrame:
    """Every utterance but the one that broke the rules (the last of a game with an offender), reward 1 each:
    the imitation set of all of a teacher's moves (``imitate.moves: all``)."""
    broke = pl.col("offender").is_not_null() & (pl.col("turn") == pl.col("turn").max().over("game"))
    return utterances.filter(~broke).with_columns(reward=pl.lit(1.0)).sort("game", "turn")


def _rewarded_moves(utterances: pl.DataFrame, options: Reward, decayed: bool, game: Game) -> pl.DataFrame:
    """The utterances that earn a reward, with it: the winner's (decayed shares, or 1 each when not
    ``decayed``; with ``credit: skill`` only of wins the game counts as the winner's own play), or with
    ``payoff: chips`` both players' (decayed shares of the chips each won or lost; a game that moved no chips
    gives none), the loser's (``loser_reward``) and the offender's rule-breaking line (``foul_line_penalty``)."""
    skill = pl.col("cause").is_in(sorted(game.skill_causes))
    if options.payoff == CHIPS:
        paid = utterances.filter(pl.col("chips") != 0)
        paid = paid.filter(skill) if options.credit == "skill" else paid
        parts = [paid.with_columns(reward=pl.col("chips") * decayed_shares(options.decay))]
    else:
        winners = utterances.filter(pl.col("role") == pl.col("winner"))
        winners = winners.filter(skill) if options.credit == "skill" else winners
        parts = [winners.with_columns(reward=decayed_shares(options.decay) if decayed else pl.lit(1.0))]
    if options.loser_reward:
        losers = utterances.filter(pl.col("role") == pl.col("loser"))
        parts.append(losers.with_columns(reward=options.loser_reward * decayed_shares(options.decay)))
    if (
        options.foul_line_penalty
    ):  # the line that broke the rules: the last of the judged part, the offender's
        fouls = utterances.filter(
            pl.col("offender").is_not_null() & (pl.col("turn") == pl.col("turn").max().over("game"))
        )
        parts.append(fouls.with_columns(role=pl.col("offender"), reward=pl.lit(-options.foul_line_penalty)))
    return pl.concat(parts).sort("game", "turn")


def _drop_unsound(moves: pl.DataFrame, options: Reward, stats: RowStats) -> pl.DataFrame:
    """``moves`` without empty or truncated utterances (unless ``keep_truncated``), counted in ``stats``."""
    if options.keep_truncated:
        return moves
    empty = pl.col("content").str.strip_chars() == ""
    truncated = ~empty & pl.col("truncated")
    counts = moves.select(empty=empty.sum(), truncated=truncated.sum()).row(0, named=True)
    stats.dropped_empty += counts["empty"]
    stats.dropped_truncated += counts["truncated"]
    return moves.filter(~empty & ~pl.col("truncated"))


def _weigh(moves: pl.DataFrame, options: Reward, stats: RowStats, roles: Sequence[str]) -> pl.DataFrame:
    """Per-role baselines (when asked) and role weights, counted in ``stats``."""
    stats.used = moves["game"].n_unique()
    stats.no_rows = stats.records - stats.used - stats.cut_games
    stats.negative_rows = moves.filter(pl.col("reward") < 0).height
    stats.role_games = {role: moves.filter(pl.col("role") == role)["game"].n_unique() for role in roles}
    if options.role_baseline and moves.height:
        stats.baselines = dict(moves.group_by("role").agg(pl.col("reward").mean()).iter_rows())
        moves = moves.with_columns(pl.col("reward") - pl.col("role").replace_strict(stats.baselines))
    stats.role_weights = dict(zip(roles, role_weights(*(stats.role_games[role] for role in roles))))
    stats.rows.update(dict(moves["role"].value_counts().iter_rows()))
    return moves.with_columns(
        weight=pl.col("role").replace_strict(stats.role_weights, return_dtype=pl.Float64)
    )


def _in_word_order(episodes: Sequence[Mapping], indices: Sequence[int]) -> tuple[list[Mapping], list[int]]:
    """The games ordered by their word (``word_index``, then ``seed``), each with its position in the file.

    A play stage writes its games as they end, and when they end depends on the batch they were played in
    and on where a resumed run took up again; the rows built from them (one seeded prompt draw per row, in
    game order) and the model trained on them must not. Files whose games do not all carry a word index
    (an import of another project's games) keep their own order."""
    if any(type(e.get("word_index")) is not int for e in episodes):
        return list(episodes), list(indices)
    order = sorted(
        range(len(episodes)),
        key=lambda i: (episodes[i]["word_index"], episodes[i].get("seed") or 0, indices[i]),
    )
    return [episodes[i] for i in order], [indices[i] for i in order]


def _game_rows(
    episodes: Sequence[Mapping],
    indices: Sequence[int] | None,
    seed: int,
    decayed: bool,
    options: Reward,
    game: Game,
    moves: str = WINNERS,
) -> tuple[list[dict], RowStats]:
    """Rows from ``game``'s judged games: the rewarded moves (a polars frame; ``moves`` all: every fair move,
    reward 1), then each move's prompt (:meth:`spag.game.base.Game.row_prompt`, one seeded draw per row, in
    game and turn order)."""
    episodes, indices = _in_word_order(episodes, indices if indices is not None else range(len(episodes)))
    stats = RowStats(records=len(episodes))
    verdicts = [game.judge_episode(e) for e in progress(episodes, desc="judging", unit="ep", disable=None)]
    stats.outcomes.update(v.outcome for v in verdicts)
    if options.payoff == CHIPS and not game.for_chips:
        raise SettingError("reward.payoff", f"the game {game.name} is not played for chips (use wins)")
    utterances = _utterances(episodes, verdicts, game, chips=options.payoff == CHIPS)
    moves = (
        _fair_moves(utterances) if moves == ALL_MOVES else _rewarded_moves(utterances, options, decayed, game)
    )
    sound = _drop_unsound(moves, options, stats)
    stats.cut_games = moves["game"].n_unique() - sound["game"].n_unique()
    moves = _weigh(sound, options, stats, game.roles)
    rng = random.Random(seed)
    rows = []
    for move in progress(
        moves.iter_rows(named=True), total=moves.height, desc="rows", unit="row", disable=None
    ):
        episode = episodes[move["game"]]
        target, turn = episode["target_word"], move["turn"]
        before = [{"role": u["role"], "content": u["content"]} for u in episode["history"][:turn]]
        prompt, bounds = game.of_episode(episode).row_prompt(move["role"], target, before, rng)
        index = indices[move["game"]]
        rows.append(
            make_row(
                prompt,
                move["content"].strip(),
                reward=move["reward"],
                weight=move["weight"],
                role=move["role"],
                target_word=target,
                turn=turn,
                episode=episode_id(episode, index),
                history_bounds=bounds,
            )
        )
    return rows, stats


def reward_rows(
    episodes: Sequence[Mapping],
    seed: int = 0,
    indices: Sequence[int] | None = None,
    options: Reward | None = None,
    game: Game | None = None,
) -> tuple[list[dict], RowStats]:
    """SPAG training rows from validated episodes of ``game`` (default: Adversarial Taboo with its default
    settings): decayed, normalised rewards and role weights.

    ``options`` (a ``reward`` section) holds the reward decay and adds rows beyond the winners' (foul
    penalty, losers' lines) and the per-role baseline (default: the paper's winners-only rows, decay 0.8).
    ``indices`` gives each episode's position in its source file (for the ``episode`` column when an
    episode has no ``id``); by default its position in ``episodes``.
    """
    return _game_rows(episodes, indices, seed, True, options or Reward(), game or default_game())


def imitation_rows(
    episodes: Sequence[Mapping],
    seed: int = 0,
    indices: Sequence[int] | None = None,
    keep_truncated: bool = False,
    game: Game | None = None,
    moves: str = WINNERS,
) -> tuple[list[dict], RowStats]:
    """The imitation set from a teacher's episodes: every winning utterance (``moves`` all: every utterance
    but a rule-breaking one, in every game), reward 1, role weights (empty or truncated utterances left out
    unless ``keep_truncated``)."""
    return _game_rows(
        episodes, indices, seed, False, Reward(keep_truncated=keep_truncated), game or default_game(), moves
    )


# -------------------------------------------------------------------------------------------- reading


def _check_episode(record: Mapping, index: int, source: str, game: Game | None) -> dict:
    episode = validate_episode(record, index, source, game)
    if not episode["history"]:
        raise DataError(source, index, "empty 'history': no utterance was played")
    played = episode.get("game")
    if game is not None and played and played != game.name:  # its judge cannot decide another game's episodes
        raise DataError(
            source,
            index,
            f"was played in {played}, not {game.name}: give --game {played} (or a params file of that game)",
        )
    return episode


def read_episode_records(
    path: str | os.PathLike,
    errors: list[DataError] | None = None,
    ready_made: list[dict] | None = None,
    duplicates: list[int] | None = None,
    game: Game | None = None,
) -> tuple[list[dict], list[int], int]:
    """Valid episodes in ``path`` (of ``game`` where one does not name its game), their positions in it, and
    how many records it holds.

    An episode that repeats an earlier one (same target, place in its run, turns and utterances: a shard
    copied, two files joined) is left out, its position added to ``duplicates``, so no game is learned from
    twice.
    Bad records are skipped into ``errors``.
    An empty file, and without ``errors`` the first bad record, raise DataError. With ``ready_made``, records that are
    already training rows (query/target or prompt/completion, no history) are collected there as
    ``(index, record)`` instead of being rejected.
    """
    source = str(path)
    episodes, indices = [], []
    seen: set[str] = set()
    records = read_records(path)
    if not records:  # a wrong path, a stage that played nothing: say so, write nothing
        raise DataError(path, None, "holds no episodes")
    for index, record in enumerate(records):
        if (
            ready_made is not None
            and isinstance(record, Mapping)
            and "history" not in record
            and ({"query", "target"} <= record.keys() or {"prompt", "completion"} <= record.keys())
        ):
            ready_made.append((index, record))
            continue
        try:
            episode = _check_episode(record, index, source, game)
        except DataError as error:
            collect_or_raise(error, errors)
            continue
        key = _game_key(episode)
        if key in seen:
            if duplicates is not None:
                duplicates.append(index)
            continue
        seen.add(key)
        episodes.append(episode)
        indices.append(index)
    return episodes, indices, len(records)


def _game_key(episode: Mapping) -> str:
    """What makes two records the same game: its target, its length, its place in the run that played it
    (two games of a small game's target may go alike) and what was said, by whom."""
    return json.dumps(
        [
            episode["target_word"],
            episode.get("max_turns"),
            episode.get("word_index"),
            episode.get("seed"),
            [(u["role"], u["content"]) for u in episode["history"]],
        ]
    )


def _raise_if_strict(errors: list[DataError], strict: bool, what: str, records: int | None = None) -> None:
    """Report the skipped records; stop when ``strict`` and any is bad, or when every one of ``records`` is."""
    for error in errors:
        print(f"{'error' if strict else 'skipped'}: {error}", file=sys.stderr)
    if strict and errors:
        raise DataError(what, None, f"{len(errors)} bad record(s); nothing written (--strict)")
    if errors and records is not None and len(errors) >= records:
        raise DataError(
            what, None, f"every record is bad ({len(errors)}; the first: {errors[0]}); nothing written"
        )


def build_reward_set(
    episodes_path: str | os.PathLike,
    output: str | os.PathLike,
    reward: Reward | None = None,
    game: Game | None = None,
    seed: int = 0,
    strict: bool = False,
    control: bool = False,
) -> RowStats:
    """``spag reward``: episodes file -> SPAG training rows (+ general SFT rows) written to ``output``.

    ``reward`` (a ``reward`` section): the decay, the rows beyond the winners' (foul penalty, losers'
    rewards), the per-role baseline, the credit, and the general SFT rows to mix in. ``control`` keeps the
    general SFT rows only: the ablation arm that trains without game rows. ``replace``: what an existing
    ``output`` may be replaced by (:func:`spag.runtime.atomic.atomic_path`).
    """
    reward, game = reward or Reward(), game or default_game()
    check_output(output)
    errors: list[DataError] = []
    duplicates: list[int] = []
    episodes, indices, count = read_episode_records(episodes_path, errors, duplicates=duplicates, game=game)
    _raise_if_strict(errors, strict, str(episodes_path), count)
    rows, stats = reward_rows(episodes, seed, indices, reward, game)
    if control:
        rows = []
        stats.rows.clear()
    stats.records, stats.bad, stats.duplicates = count, len(errors), len(duplicates)
    general = _mix_sft(stats, reward.sft, reward.sft_limit, seed, strict, reward.sft_format)
    write_rows(rows + general, output)
    return stats


def _mix_sft(
    stats: RowStats, sft, sft_limit: int | None, seed: int, strict: bool, sft_format: str = "chat"
) -> list[dict]:
    """The general SFT rows to append (none without ``sft``), counted in ``stats``."""
    if sft is None:
        return []
    sft_errors: list[DataError] = []
    general = load_sft(sft, sft_limit, seed, sft_errors, sft_format)
    _raise_if_strict(sft_errors, strict, str(sft))
    stats.sft_bad = len(sft_errors)
    stats.sft_source = str(sft)
    stats.sft_rows = len(general)
    stats.rows[SFT] += len(general)
    return general


def build_imitation_set(
    episodes_path: str | os.PathLike,
    output: str | os.PathLike,
    imitate: Imitate | None = None,
    game: Game | None = None,
    seed: int = 0,
    strict: bool = False,
    keep_truncated: bool = False,
) -> RowStats:
    """``spag imitation-data``: a teacher's episodes (or ready-made query/target rows) -> imitation rows.

    ``imitate`` (an ``imitate`` section) says which of the teacher's moves are imitated (``moves``: the
    winners', or all) and names general instruction rows to mix in, as ``spag reward`` does, so that
    imitation does not erode the model's general abilities (and has data even when the teacher won no game).
    The original code's imitation set had none (``imitate.sft: null`` in paper mode).
    """
    imitate, game = imitate or Imitate(), game or default_game()
    check_output(output)
    errors: list[DataError] = []
    ready_made: list[tuple[int, dict]] = []
    duplicates: list[int] = []
    episodes, indices, count = read_episode_records(episodes_path, errors, ready_made, duplicates, game)
    made = ready_made_rows(ready_made, str(episodes_path), errors, game)
    _raise_if_strict(errors, strict, str(episodes_path), count)
    rows, stats = imitation_rows(episodes, seed, indices, keep_truncated, game, imitate.moves)
    stats.records, stats.bad, stats.duplicates = count, len(errors), len(duplicates)
    stats.instruction_rows = len(made)
    for row in made:
        stats.rows[row["role"] or "unknown"] += 1
    general = _mix_sft(stats, imitate.sft, imitate.sft_limit, seed, strict, imitate.sft_format)
    write_rows(rows + made + general, output)
    return stats
