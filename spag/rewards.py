"""Rewards and training sets: judged episodes become the rows the trainers learn from.

A row (:mod:`spag.rows`) of a game pairs a ``prompt``, the user-message text asking ``role`` for its next
utterance given the game so far (the history *before* that utterance), rendered with a training
template drawn at random (seeded), with the ``completion``, the utterance itself, stripped. General
instruction rows (:mod:`spag.sft`) are mixed in when asked for.

Only decisive games teach anything: the judge (:mod:`spag.game.rules`, never re-implemented here) says
who won, and the winner's utterances up to the deciding one become rows. Ties and fouls give nothing.
An utterance that is empty, or was cut at ``max_new_tokens`` (its ``truncated`` flag), never becomes a
row unless ``keep_truncated`` asks for it; the stats count what was dropped.

Reward of the winner's k-th utterance (k = 1..n) in one game, with decay d (0.8 in the paper)::

    r_k = (1/d)^k / sum_j (1/d)^j          so later moves weigh more and each game sums to 1.

Beyond the paper's winners-only rows, :class:`RewardOptions` can add a penalty row for the attacker's
rule-breaking line, negative rows for the loser's lines, and a per-role baseline (all off by default).

Role weights, with A games that gave attacker rows and D games that gave defender rows (with winners-only
rows: the attacker's and the defender's wins)::

    w_attacker = (A + D) / (2A),   w_defender = (A + D) / (2D)       (0 for a side with no rows)

so the attacker's rows together carry (A + D)/2 of weighted reward, and so do the defender's: each role
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

from spag.config import Reward, check, default
from spag.console import progress
from spag.game.episodes import validate_episode
from spag.game.original_prompts import row_query
from spag.game.prompts import training_prompt_with_bounds
from spag.game.rules import (
    ATTACKER,
    ATTACKER_BREAKS_RULES,
    CORRECT_GUESS,
    DEFENDER,
    DEFENDER_SAID_WORD,
    OUTCOMES,
    ROLES,
    WHOLE_WORD,
    judge_episode,
)
from spag.io import DataError, Replace, collect_or_raise, read_records
from spag.ready_made import ready_made_rows
from spag.rows import SFT, check_output, episode_id, make_row, write_rows
from spag.sft import load_sft

DEFAULT_DECAY = default(Reward, "decay")
SKILL_WINS = (DEFENDER_SAID_WORD, CORRECT_GUESS)  # wins by the winner's own play (credit: skill)


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
    bad: int = 0  # records skipped as malformed
    duplicates: int = 0  # records that repeat an earlier game, left out
    instruction_rows: int = 0  # ready-made prompt/completion rows taken over as they were
    rows: Counter = field(default_factory=Counter)  # rows per role ("sft" for general instruction rows)
    attacker_games: int = 0
    defender_games: int = 0
    attacker_weight: float = 0.0
    defender_weight: float = 0.0
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
            "bad": self.bad,
            "duplicates": self.duplicates,
            "instruction_rows": self.instruction_rows,
            "rows": dict(self.rows),
            "attacker_games": self.attacker_games,
            "defender_games": self.defender_games,
            "attacker_weight": self.attacker_weight,
            "defender_weight": self.defender_weight,
            "sft_rows": self.sft_rows,
            "sft_bad": self.sft_bad,
            "sft_source": self.sft_source,
            "negative_rows": self.negative_rows,
            "dropped_empty": self.dropped_empty,
            "dropped_truncated": self.dropped_truncated,
            "baselines": dict(self.baselines),
        }

    def line(self, with_sft: bool = True) -> str:
        outcomes = ", ".join(f"{o} {self.outcomes[o]}" for o in OUTCOMES if self.outcomes[o])
        parts = [
            (
                f"{self.records} records: {self.used} games used, {self.no_rows} gave no rows (tie/foul), "
                f"{self.bad} skipped as bad"
            )
        ]
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
            parts.append(f"dropped {self.dropped_truncated} truncated and {self.dropped_empty} empty utterances "
                         "(--keep-truncated keeps them)")
        if self.baselines:
            parts.append("baselines: " + ", ".join(f"{k} {v:.3g}" for k, v in sorted(self.baselines.items())))
        parts.append(f"weights: attacker {self.attacker_weight:.4g}, defender {self.defender_weight:.4g}")
        if with_sft and self.sft_source:
            skipped = f" ({self.sft_bad} skipped as bad)" if self.sft_bad else ""
            parts.append(f"sft: {self.sft_rows} rows from {self.sft_source}{skipped}")
        elif with_sft:
            parts.append("sft: none (no --sft given, the SFT term has no data)")
        return "; ".join(parts)


# ----------------------------------------------------------------------------------------- game rows


@dataclass(frozen=True)
class RewardOptions:
    """Rewards beyond the paper's winners-only rows (all off by default, as in the paper).

    - ``foul_penalty`` p > 0: in a game the attacker lost by saying the word, the rule-breaking attacker
      line becomes a row with reward −p.
    - ``loser_reward`` q < 0: the loser's utterances of a decisive game become rows with rewards
      q · r_k (the same decayed shares r_k as the winner's, so they sum to q per game).
    - ``role_baseline``: subtract from every game row's reward the mean reward of its role's rows in
      the set (a per-role baseline, the role-conditioned advantage of SPIRAL), so each role's rewards
      average 0 and a role's better moves are pushed up and its worse ones down.
    - ``credit`` "skill": the winner's rows come only from games won by the winner's own play (the
      defender said the word the attacker led it to, or guessed right), not from the opponent's wrong
      guess, which rewards an attacker whatever its line said.
    - ``keep_truncated``: also make rows of empty utterances and of those cut at ``max_new_tokens``
      (left out by default: a cut reply followed by the end-of-sequence token teaches stopping mid-sentence).
    """

    decay: float = DEFAULT_DECAY
    foul_penalty: float = default(Reward, "foul_penalty")
    loser_reward: float = default(Reward, "loser_reward")
    role_baseline: bool = default(Reward, "role_baseline")
    keep_truncated: bool = default(Reward, "keep_truncated")
    credit: str = default(Reward, "credit")

    def __post_init__(self):
        check(Reward, decay=self.decay, foul_penalty=self.foul_penalty, loser_reward=self.loser_reward,
              role_baseline=self.role_baseline, keep_truncated=self.keep_truncated, credit=self.credit)


# The moves of a set of games are one polars frame: a row per utterance that earns a reward, with its
# game's position (``game``), its ``turn`` (index in the history), ``role`` and ``reward``.
_KEY = ["game", "role"]


def _utterances(episodes: Sequence[Mapping], verdicts: Sequence) -> pl.DataFrame:
    """Every utterance of every game's judged part, with the game's winner, loser and outcome."""
    columns: dict[str, list] = {"game": [], "turn": [], "role": [], "content": [], "truncated": []}
    for game, (episode, verdict) in enumerate(zip(episodes, verdicts)):
        for turn, utterance in enumerate(episode["history"][: verdict.turns]):
            columns["game"].append(game)
            columns["turn"].append(turn)
            columns["role"].append(utterance["role"])
            columns["content"].append(str(utterance.get("content") or ""))
            columns["truncated"].append(bool(utterance.get("truncated")))
    games = pl.DataFrame({
        "game": range(len(verdicts)),
        "outcome": [v.outcome for v in verdicts],
        "cause": [v.cause for v in verdicts],
        "winner": [v.winner for v in verdicts],
    }, schema={"game": pl.Int64, "outcome": pl.String, "cause": pl.String, "winner": pl.String})
    loser = (pl.when(pl.col("winner") == ATTACKER).then(pl.lit(DEFENDER))
             .when(pl.col("winner") == DEFENDER).then(pl.lit(ATTACKER)))
    return (pl.DataFrame(columns, schema={"game": pl.Int64, "turn": pl.Int64, "role": pl.String,
                                          "content": pl.String, "truncated": pl.Boolean})
            .join(games.with_columns(loser=loser), on="game", how="left"))


def decayed_shares(decay: float) -> pl.Expr:
    """:func:`utterance_rewards` as a polars expression over a frame of moves in turn order: the share of
    each move among its game's moves of the same role, (1/decay)^k normalised to sum to 1."""
    k = pl.col("turn").rank("ordinal").over(_KEY)
    raw = pl.lit(decay, dtype=pl.Float64).pow(pl.len().over(_KEY) - k)
    return raw / raw.sum().over(_KEY)


def _rewarded_moves(utterances: pl.DataFrame, options: RewardOptions, decayed: bool) -> pl.DataFrame:
    """The utterances that earn a reward, with it: the winner's (decayed shares, or 1 each when not
    ``decayed``), the loser's (``loser_reward``) and the rule-breaking attacker line (``foul_penalty``)."""
    winners = utterances.filter(pl.col("role") == pl.col("winner"))
    if options.credit == "skill":
        winners = winners.filter(pl.col("cause").is_in(SKILL_WINS))
    parts = [winners.with_columns(reward=decayed_shares(options.decay) if decayed else pl.lit(1.0))]
    if options.loser_reward:
        losers = utterances.filter(pl.col("role") == pl.col("loser"))
        parts.append(losers.with_columns(reward=options.loser_reward * decayed_shares(options.decay)))
    if options.foul_penalty:  # the line that said the word: the last of the judged part
        fouls = utterances.filter((pl.col("outcome") == ATTACKER_BREAKS_RULES)
                                  & (pl.col("turn") == pl.col("turn").max().over("game")))
        parts.append(fouls.with_columns(role=pl.lit(ATTACKER), reward=pl.lit(-options.foul_penalty)))
    return pl.concat(parts).sort("game", "turn")


def _drop_unsound(moves: pl.DataFrame, options: RewardOptions, stats: RowStats) -> pl.DataFrame:
    """``moves`` without empty or truncated utterances (unless ``keep_truncated``), counted in ``stats``."""
    if options.keep_truncated:
        return moves
    empty = pl.col("content").str.strip_chars() == ""
    truncated = ~empty & pl.col("truncated")
    counts = moves.select(empty=empty.sum(), truncated=truncated.sum()).row(0, named=True)
    stats.dropped_empty += counts["empty"]
    stats.dropped_truncated += counts["truncated"]
    return moves.filter(~empty & ~pl.col("truncated"))


def _weigh(moves: pl.DataFrame, options: RewardOptions, stats: RowStats) -> pl.DataFrame:
    """Per-role baselines (when asked) and role weights, counted in ``stats``."""
    stats.used = moves["game"].n_unique()
    stats.no_rows = stats.records - stats.used
    stats.negative_rows = moves.filter(pl.col("reward") < 0).height
    games = {role: moves.filter(pl.col("role") == role)["game"].n_unique() for role in ROLES}
    stats.attacker_games, stats.defender_games = games[ATTACKER], games[DEFENDER]
    if options.role_baseline and moves.height:
        stats.baselines = dict(moves.group_by("role").agg(pl.col("reward").mean()).iter_rows())
        moves = moves.with_columns(pl.col("reward") - pl.col("role").replace_strict(stats.baselines))
    stats.attacker_weight, stats.defender_weight = role_weights(games[ATTACKER], games[DEFENDER])
    weight = {ATTACKER: stats.attacker_weight, DEFENDER: stats.defender_weight}
    stats.rows.update(dict(moves["role"].value_counts().iter_rows()))
    return moves.with_columns(weight=pl.col("role").replace_strict(weight, return_dtype=pl.Float64))


def _game_rows(
    episodes: Sequence[Mapping],
    indices: Sequence[int] | None,
    seed: int,
    decayed: bool,
    options: RewardOptions,
    rules: str = WHOLE_WORD,
    templates: str | os.PathLike | None = None,
    row_prompts: str = "templates",
) -> tuple[list[dict], RowStats]:
    """Rows from judged games: the rewarded moves (a polars frame), then each move's prompt.

    ``rules`` is the judge's rule set; ``templates`` the templates file of the prompts (None: shipped);
    ``row_prompts`` "original" draws each prompt from the original's query formats instead."""
    stats = RowStats(records=len(episodes))
    verdicts = [judge_episode(e, rules) for e in progress(episodes, desc="judging", unit="ep", disable=None)]
    stats.outcomes.update(v.outcome for v in verdicts)
    moves = _rewarded_moves(_utterances(episodes, verdicts), options, decayed)
    moves = _weigh(_drop_unsound(moves, options, stats), options, stats)
    rng = random.Random(seed)  # one draw per row, in game and turn order
    rows = []
    for move in progress(moves.iter_rows(named=True), total=moves.height, desc="rows", unit="row", disable=None):
        episode = episodes[move["game"]]
        target, max_turns, turn = episode["target_word"], int(episode["max_turns"]), move["turn"]
        before = [{"role": u["role"], "content": u["content"]} for u in episode["history"][:turn]]
        if row_prompts == "original":  # the model's whole input: no history lines to give up
            prompt, bounds = row_query(before, target, max_turns, rng), None
        else:
            prompt, bounds = training_prompt_with_bounds(move["role"], target, before, max_turns, rng, templates)
        index = indices[move["game"]] if indices is not None else move["game"]
        rows.append(make_row(prompt, move["content"].strip(), reward=move["reward"], weight=move["weight"],
                             role=move["role"], target_word=target, turn=turn, episode=episode_id(episode, index),
                             history_bounds=bounds))
    return rows, stats


def reward_rows(
    episodes: Sequence[Mapping],
    seed: int = 0,
    indices: Sequence[int] | None = None,
    options: RewardOptions | None = None,
    rules: str = WHOLE_WORD,
    templates: str | os.PathLike | None = None,
    row_prompts: str = "templates",
) -> tuple[list[dict], RowStats]:
    """SPAG training rows from validated episodes: decayed, normalised rewards and role weights.

    ``options`` holds the reward decay and adds rows beyond the winners' (foul penalty, losers' lines) and
    the per-role baseline (default: the paper's winners-only rows, decay 0.8). ``indices`` gives each
    episode's position in its source file (for the ``episode`` column when an episode has no ``id``); by
    default its position in ``episodes``.
    """
    return _game_rows(episodes, indices, seed, True, options or RewardOptions(), rules, templates, row_prompts)


def imitation_rows(
    episodes: Sequence[Mapping],
    seed: int = 0,
    indices: Sequence[int] | None = None,
    rules: str = WHOLE_WORD,
    templates: str | os.PathLike | None = None,
    keep_truncated: bool = False,
    row_prompts: str = "templates",
) -> tuple[list[dict], RowStats]:
    """The imitation set from a teacher's episodes: every winning utterance, reward 1, role weights
    (empty or truncated utterances left out unless ``keep_truncated``)."""
    options = RewardOptions(foul_penalty=0.0, loser_reward=0.0, role_baseline=False, keep_truncated=keep_truncated)
    return _game_rows(episodes, indices, seed, False, options, rules, templates, row_prompts)


# -------------------------------------------------------------------------------------------- reading


def _check_episode(record: Mapping, index: int, source: str) -> dict:
    episode = validate_episode(record, index, source)
    if not episode["history"]:
        raise DataError(source, index, "empty 'history': no utterance was played")
    return episode


def read_episode_records(
    path: str | os.PathLike, errors: list[DataError] | None = None, ready_made: list[dict] | None = None,
    duplicates: list[int] | None = None,
) -> tuple[list[dict], list[int], int]:
    """Valid episodes in ``path``, their positions in it, and how many records it holds.

    An episode that repeats an earlier one (same target word, turns and utterances: a shard copied, two
    files joined) is left out, its position added to ``duplicates``, so no game is learned from twice.
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
            episode = _check_episode(record, index, source)
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
    """What makes two records the same game: its word, its length and what was said, by whom."""
    return json.dumps([episode["target_word"], episode.get("max_turns"),
                       [(u["role"], u["content"]) for u in episode["history"]]])


def _raise_if_strict(errors: list[DataError], strict: bool, what: str, records: int | None = None) -> None:
    """Report the skipped records; stop when ``strict`` and any is bad, or when every one of ``records`` is."""
    for error in errors:
        print(f"{'error' if strict else 'skipped'}: {error}", file=sys.stderr)
    if strict and errors:
        raise DataError(what, None, f"{len(errors)} bad record(s); nothing written (--strict)")
    if errors and records is not None and len(errors) >= records:
        raise DataError(what, None, f"every record is bad ({len(errors)}; the first: {errors[0]}); nothing written")


def build_reward_set(
    episodes_path: str | os.PathLike,
    output: str | os.PathLike,
    sft: str | os.PathLike | None = None,
    seed: int = 0,
    strict: bool = False,
    sft_limit: int | None = None,
    control: bool = False,
    options: RewardOptions | None = None,
    rules: str = WHOLE_WORD,
    templates: str | os.PathLike | None = None,
    row_prompts: str = "templates",
    sft_format: str = "chat",
    replace: Replace = "no",
) -> RowStats:
    """``spag reward``: episodes file -> SPAG training rows (+ general SFT rows) written to ``output``.

    ``control`` keeps the general SFT rows only: the ablation arm that trains without game rows.
    ``options``: foul penalty, losers' rewards, per-role baseline (see :class:`RewardOptions`).
    ``replace``: what an existing ``output`` may be replaced by (:func:`spag.io.atomic_path`).
    """
    check_output(output)
    errors: list[DataError] = []
    duplicates: list[int] = []
    episodes, indices, count = read_episode_records(episodes_path, errors, duplicates=duplicates)
    _raise_if_strict(errors, strict, str(episodes_path), count)
    rows, stats = reward_rows(episodes, seed, indices, options, rules, templates, row_prompts)
    if control:
        rows = []
        stats.rows.clear()
    stats.records, stats.bad, stats.duplicates = count, len(errors), len(duplicates)
    general = _mix_sft(stats, sft, sft_limit, seed, strict, sft_format)
    write_rows(rows + general, output, replace=replace)
    return stats


def _mix_sft(stats: RowStats, sft, sft_limit: int | None, seed: int, strict: bool,
             sft_format: str = "chat") -> list[dict]:
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
    seed: int = 0,
    strict: bool = False,
    sft: str | os.PathLike | None = None,
    sft_limit: int | None = None,
    rules: str = WHOLE_WORD,
    templates: str | os.PathLike | None = None,
    keep_truncated: bool = False,
    row_prompts: str = "templates",
    sft_format: str = "chat",
    replace: Replace = "no",
) -> RowStats:
    """``spag imitation-data``: a teacher's episodes (or ready-made query/target rows) -> imitation rows.

    ``sft`` mixes general instruction rows in, as ``spag reward`` does, so that imitation does not
    erode the model's general abilities (and has data even when the teacher won no game). The original
    code's imitation set had none (``imitate.sft: null`` in paper mode).
    """
    check_output(output)
    errors: list[DataError] = []
    ready_made: list[tuple[int, dict]] = []
    duplicates: list[int] = []
    episodes, indices, count = read_episode_records(episodes_path, errors, ready_made, duplicates)
    made = ready_made_rows(ready_made, str(episodes_path), errors)
    _raise_if_strict(errors, strict, str(episodes_path), count)
    rows, stats = imitation_rows(episodes, seed, indices, rules, templates, keep_truncated, row_prompts)
    stats.records, stats.bad, stats.duplicates = count, len(errors), len(duplicates)
    stats.instruction_rows = len(made)
    for row in made:
        stats.rows[row["role"] or "unknown"] += 1
    general = _mix_sft(stats, sft, sft_limit, seed, strict, sft_format)
    write_rows(rows + made + general, output, replace=replace)
    return stats
