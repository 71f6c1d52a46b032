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
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from spag.config import Reward, check, default
from spag.game.episodes import validate_episode
from spag.game.original_prompts import row_query
from spag.game.prompts import training_prompt_with_bounds
from spag.game.rules import (
    ATTACKER,
    ATTACKER_BREAKS_RULES,
    DEFENDER,
    OUTCOMES,
    ROLES,
    WHOLE_WORD,
    judge_episode,
)
from spag.io import DataError, collect_or_raise, read_records
from spag.ready_made import ready_made_rows
from spag.rows import GAME, SFT, check_output, episode_id, make_row, write_rows
from spag.sft import load_sft

DEFAULT_DECAY = default(Reward, "decay")


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
    - ``keep_truncated``: also make rows of empty utterances and of those cut at ``max_new_tokens``
      (left out by default: a cut reply followed by the end-of-sequence token teaches stopping mid-sentence).
    """

    decay: float = DEFAULT_DECAY
    foul_penalty: float = default(Reward, "foul_penalty")
    loser_reward: float = default(Reward, "loser_reward")
    role_baseline: bool = default(Reward, "role_baseline")
    keep_truncated: bool = default(Reward, "keep_truncated")

    def __post_init__(self):
        check(Reward, decay=self.decay, foul_penalty=self.foul_penalty, loser_reward=self.loser_reward,
              role_baseline=self.role_baseline, keep_truncated=self.keep_truncated)


def _is_garbage(utterance: Mapping) -> str | None:
    """Why an utterance must not be learnt from (None: it may): empty, or cut at max_new_tokens."""
    if not str(utterance.get("content") or "").strip():
        return "empty"
    if utterance.get("truncated"):
        return "truncated"
    return None


def _keep_sound_moves(history: Sequence[Mapping], moves: list[tuple[str, int, float]], options: RewardOptions,
                      stats: RowStats) -> list[tuple[str, int, float]]:
    """``moves`` without empty or truncated utterances (unless ``keep_truncated``), counted in ``stats``."""
    if options.keep_truncated:
        return moves
    kept = []
    for move in moves:
        why = _is_garbage(history[move[1]])
        if why == "empty":
            stats.dropped_empty += 1
        elif why == "truncated":
            stats.dropped_truncated += 1
        else:
            kept.append(move)
    return kept


def _rewarded_moves(episode: Mapping, verdict, winner_rewards, options: RewardOptions) -> list[tuple[str, int, float]]:
    """``(role, turn, reward)`` of every utterance of one judged game that earns a reward."""
    history = episode["history"][: verdict.turns]
    moves: list[tuple[str, int, float]] = []
    winner = verdict.winner
    if winner:
        mine = [t for t, u in enumerate(history) if u["role"] == winner]
        moves += [(winner, t, r) for t, r in zip(mine, winner_rewards(len(mine)))]
        if options.loser_reward:
            loser = DEFENDER if winner == ATTACKER else ATTACKER
            theirs = [t for t, u in enumerate(history) if u["role"] == loser]
            shares = utterance_rewards(len(theirs), options.decay)
            moves += [(loser, t, options.loser_reward * r) for t, r in zip(theirs, shares)]
    elif verdict.outcome == ATTACKER_BREAKS_RULES and options.foul_penalty and history:
        moves.append((ATTACKER, len(history) - 1, -options.foul_penalty))  # the line that said the word
    return sorted(moves, key=lambda move: move[1])


def _game_rows(
    episodes: Sequence[Mapping],
    indices: Sequence[int] | None,
    seed: int,
    winner_rewards,
    stats: RowStats,
    options: RewardOptions = RewardOptions(),
    rules: str = WHOLE_WORD,
    templates: str | os.PathLike | None = None,
    row_prompts: str = "templates",
) -> list[dict]:
    """Rows from judged games; ``winner_rewards(n)`` gives the rewards of a winner's n moves.

    ``rules`` is the judge's rule set; ``templates`` the templates file of the prompts (None: shipped);
    ``row_prompts`` "original" draws each prompt from the original's query formats instead."""
    from spag.console import progress

    rng = random.Random(seed)
    rows: list[dict] = []
    for position, episode in enumerate(progress(episodes, desc="episodes", unit="ep", disable=None)):
        index = indices[position] if indices is not None else position
        verdict = judge_episode(episode, rules)
        stats.outcomes[verdict.outcome] += 1
        history = episode["history"]
        moves = _keep_sound_moves(history, _rewarded_moves(episode, verdict, winner_rewards, options), options, stats)
        if not moves:
            stats.no_rows += 1
            continue
        stats.used += 1
        roles = {role for role, _, _ in moves}
        stats.attacker_games += ATTACKER in roles
        stats.defender_games += DEFENDER in roles
        target, max_turns = episode["target_word"], int(episode["max_turns"])
        for role, turn, reward in moves:
            before = [{"role": u["role"], "content": u["content"]} for u in history[:turn]]
            if reward < 0:
                stats.negative_rows += 1
            if row_prompts == "original":  # the model's whole input: no history lines to give up
                prompt, bounds = row_query(before, target, max_turns, rng), None
            else:
                prompt, bounds = training_prompt_with_bounds(role, target, before, max_turns, rng, templates)
            rows.append(make_row(prompt, history[turn]["content"].strip(), reward=float(reward),
                                 weight=0.0,  # set once every game has been counted
                                 role=role, target_word=target, turn=turn, episode=episode_id(episode, index),
                                 history_bounds=bounds))
    return rows


def _subtract_role_baselines(rows: list[dict], stats: RowStats) -> None:
    """Centre each role's game rewards on 0 (the role's mean reward is its baseline)."""
    for role in ROLES:
        mine = [row for row in rows if row["kind"] == GAME and row["role"] == role]
        if not mine:
            continue
        baseline = sum(row["reward"] for row in mine) / len(mine)
        stats.baselines[role] = baseline
        for row in mine:
            row["reward"] -= baseline


def _apply_role_weights(rows: list[dict], stats: RowStats) -> None:
    stats.attacker_weight, stats.defender_weight = role_weights(stats.attacker_games, stats.defender_games)
    weight = {ATTACKER: stats.attacker_weight, DEFENDER: stats.defender_weight}
    for row in rows:
        if row["kind"] == GAME and row["role"] in weight:
            row["weight"] = weight[row["role"]]
        stats.rows[row["role"] or "unknown"] += 1


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
    the per-role baseline (default: the paper's winners-only rows, decay 0.8). ``indices`` gives each episode's position in its source file (for
    the ``episode`` column when an episode has no ``id``); by default its position in ``episodes``.
    """
    options = options or RewardOptions()
    stats = RowStats(records=len(episodes))
    rows = _game_rows(episodes, indices, seed, lambda n: utterance_rewards(n, options.decay), stats, options,
                      rules, templates, row_prompts)
    if options.role_baseline:
        _subtract_role_baselines(rows, stats)
    _apply_role_weights(rows, stats)
    return rows, stats


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
    stats = RowStats(records=len(episodes))
    rows = _game_rows(episodes, indices, seed, lambda n: [1.0] * n, stats, RewardOptions(keep_truncated=keep_truncated),
                      rules=rules, templates=templates, row_prompts=row_prompts)
    _apply_role_weights(rows, stats)
    return rows, stats


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
    Without ``errors`` the first bad record raises DataError. With ``ready_made``, records that are
    already training rows (query/target or prompt/completion, no history) are collected there as
    ``(index, record)`` instead of being rejected.
    """
    source = str(path)
    episodes, indices = [], []
    seen: set[str] = set()
    records = read_records(path)
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
) -> RowStats:
    """``spag reward``: episodes file -> SPAG training rows (+ general SFT rows) written to ``output``.

    ``control`` keeps the general SFT rows only: the ablation arm that trains without game rows.
    ``options``: foul penalty, losers' rewards, per-role baseline (see :class:`RewardOptions`).
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
    write_rows(rows + general, output)
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
    write_rows(rows + made + general, output)
    return stats
